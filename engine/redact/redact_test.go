package redact

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	r := New("hunter2", "hunter2-long", "ab")
	cases := []struct{ in, want string }{
		{`password "hunter2"`, `password "***"`},
		{"hunter2-long and hunter2", "*** and ***"}, // the longest first, masked whole
		{"ab stays: too short to mask", "ab stays: too short to mask"},
		{"", ""},
	}
	for _, c := range cases {
		if got := r.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestForms(t *testing.T) {
	v := "line one\nline \"two\"\tü"
	r := New(v)
	for _, msg := range []string{
		v,
		strconv.Quote(v),
		strconv.QuoteToASCII(v),
		fmt.Sprintf("%q", v),
		"yaml block:\n  line one\n  line \"two\"\tü\n",
	} {
		got := r.String(msg)
		for _, part := range []string{"line one", `line "two"`, `line \"two\"`} {
			if strings.Contains(got, part) {
				t.Errorf("String(%q) = %q: %q survives", msg, got, part)
			}
		}
	}
}

func TestAddObject(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString([]byte("decoded-secret"))
	r := New()
	r.AddObject(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "configmap-value"}})
	if !r.Empty() {
		t.Fatalf("a ConfigMap added values: %q", r.Values())
	}
	r.AddObject(map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"data":       map[string]any{"a": enc, "n": int64(12345)},
		"stringData": map[string]any{"b": "string-data-secret"},
	})
	msg := r.String("got " + enc + ", decoded-secret and string-data-secret; configmap-value stays")
	if want := "got ***, *** and ***; configmap-value stays"; msg != want {
		t.Errorf("got %q, want %q", msg, want)
	}
	// stringData base64-encoded, as the operator applies it in data.
	sent := base64.StdEncoding.EncodeToString([]byte("string-data-secret"))
	if msg := r.String("data: {b: " + sent + "}"); msg != "data: {b: ***}" {
		t.Errorf("the encoded stringData value: got %q", msg)
	}
}

func TestError(t *testing.T) {
	var r *Redactor
	base := fmt.Errorf("reading: %w", fs.ErrNotExist)
	if got := r.Error(base); got != base {
		t.Errorf("a nil Redactor changed the error")
	}
	r = New("s3cr3t-value")
	if got := r.Error(base); got != base {
		t.Errorf("an error without values was wrapped: %v", got)
	}
	err := r.Error(fmt.Errorf("value s3cr3t-value: %w", fs.ErrNotExist))
	if err.Error() != "value ***: file does not exist" {
		t.Errorf("got %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the cause is lost")
	}
	if r.Error(nil) != nil {
		t.Errorf("Error(nil) is not nil")
	}
}

func TestValuesRoundTrip(t *testing.T) {
	r := New("first-secret\nsecond line", "plain-secret")
	again := New(r.Values()...)
	msg := `"first-secret\nsecond line" and plain-secret`
	if got, want := again.String(msg), r.String(msg); got != want || strings.Contains(got, "secret") {
		t.Errorf("a Redactor rebuilt from Values masks %q, the original %q", got, want)
	}
}

// FuzzString checks that no value a Redactor knows survives in a message
// that quotes it, whatever the value and the text around it.
func FuzzString(f *testing.F) {
	f.Add("hunter2", "password: ", " was wrong")
	f.Add("multi\nline\tvalue", "cert %q: ", "")
	f.Add("ünïcødé-sécret", "", "")
	f.Add("aaa", "aaaa", "aa")
	f.Fuzz(func(t *testing.T, secret, before, after string) {
		// A secret holding the mask's '*' can reappear from a mask and
		// the text beside it ("a" + "***" holds "a**"): not a leak.
		if len(secret) < MinLen || len(secret) > 1<<10 || strings.Contains(secret, "*") {
			return
		}
		r := New(secret)
		for _, msg := range []string{
			before + secret + after,
			before + strconv.Quote(secret) + after,
			before + fmt.Sprintf("%q", secret) + after,
		} {
			got := r.String(msg)
			if strings.Contains(got, secret) {
				t.Fatalf("secret %q survives in %q", secret, got)
			}
			if q := strconv.Quote(secret); strings.Contains(got, q[1:len(q)-1]) {
				t.Fatalf("quoted secret %q survives in %q", q, got)
			}
		}
	})
}

func TestObject(t *testing.T) {
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "db"},
		"data":       map[string]any{"password": "cGFzc3dvcmQtdmFsdWU="},
		"stringData": map[string]any{"user": "admin-user"},
	}
	r := New()
	r.AddObject(secret)
	got := r.Object(secret)
	if got["data"].(map[string]any)["password"] != Mask || got["stringData"].(map[string]any)["user"] != Mask {
		t.Errorf("Secret not masked: %v", got)
	}
	if secret["data"].(map[string]any)["password"] != "cGFzc3dvcmQtdmFsdWU=" {
		t.Errorf("the Secret given was modified")
	}
	cm := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "app"},
		"data":     map[string]any{"dsn": "postgres://admin-user:password-value@db", "mode": "prod"},
		"list":     []any{"x", map[string]any{"y": "password-value"}},
	}
	got = r.Object(cm)
	if d := got["data"].(map[string]any)["dsn"]; d != "postgres://***:***@db" {
		t.Errorf("dsn = %q", d)
	}
	if y := got["list"].([]any)[1].(map[string]any)["y"]; y != Mask {
		t.Errorf("list item = %q", y)
	}
	if cm["data"].(map[string]any)["dsn"] != "postgres://admin-user:password-value@db" {
		t.Errorf("the ConfigMap given was modified")
	}
	plain := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}}
	if got := r.Object(plain); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", plain) {
		t.Errorf("an object without secrets was copied")
	}
}
