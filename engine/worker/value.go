package worker

import (
	"encoding/json"
	"math"
	"strconv"
)

// Objects cross the pipe as JSON, which has one kind of number; Go objects
// have two (int64 and float64), and a script can tell them apart. So a
// float64 with an integral value is written with a ".0" (json.Number), and
// numbers are read back as int64 when they are integer literals that fit,
// else as float64: what was sent is what arrives.

// exact returns v ready for json.Marshal: v itself when it holds no
// integral float64 (the usual case, no copy), else a copy in which those
// are json.Numbers with a ".0".
func exact(v any) any {
	if !hasIntegralFloat(v) {
		return v
	}
	return markFloats(v)
}

func hasIntegralFloat(v any) bool {
	switch v := v.(type) {
	case float64:
		return isIntegral(v)
	case map[string]any:
		for _, e := range v {
			if hasIntegralFloat(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasIntegralFloat(e) {
				return true
			}
		}
	}
	return false
}

func isIntegral(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && f == math.Trunc(f)
}

func markFloats(v any) any {
	switch v := v.(type) {
	case float64:
		if isIntegral(v) {
			return json.Number(strconv.FormatFloat(v, 'f', -1, 64) + ".0")
		}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = markFloats(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = markFloats(e)
		}
		return out
	}
	return v
}

// numbers replaces, in place, the json.Numbers of a decoded value with
// int64 or float64, and returns it.
func numbers(v any) any {
	switch n := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(n), 64)
		return f
	case map[string]any:
		for k, e := range n {
			n[k] = numbers(e)
		}
	case []any:
		for i, e := range n {
			n[i] = numbers(e)
		}
	}
	return v
}
