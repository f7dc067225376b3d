package health

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// costLimit bounds the evaluation of one expression over one object, so
// that a health check over a large list cannot stall the operator.
const costLimit = 1_000_000

// rule is a compiled spec.healthChecks entry.
type rule struct {
	index int    // in spec.healthChecks
	field string // "spec.healthChecks[i]"
	// exprs in the order they decide: failed, current, inProgress; nil
	// when the expression is not given.
	exprs [3]cel.Program
}

// ruleOrder names the expressions of a rule and the status each decides.
var ruleOrder = [3]struct {
	name   string
	status Status
}{{"failed", Failed}, {"current", Current}, {"inProgress", InProgress}}

// env is the CEL environment of health checks: the object is `self`.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("self", cel.DynType), cel.OptionalTypes(), ext.Strings())
})

func compileRule(field string, index int, hc v1alpha1.HealthCheck) (*rule, FieldErrors) {
	r := &rule{index: index, field: field}
	var errs FieldErrors
	for i, src := range [3]string{hc.Failed, hc.Current, hc.InProgress} {
		name := ruleOrder[i].name
		if strings.TrimSpace(src) == "" {
			if name == "current" {
				errs = append(errs, &FieldError{Field: field + ".current", Msg: "must be set"})
			}
			continue
		}
		p, err := compile(src)
		if err != nil {
			errs = append(errs, &FieldError{Field: field + "." + name, Msg: err.Error()})
			continue
		}
		r.exprs[i] = p
	}
	return r, errs
}

// compile compiles one expression, which must be a boolean.
func compile(src string) (cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment of health checks: %w", err)
	}
	ast, iss := e.Compile(src)
	if err := iss.Err(); err != nil {
		return nil, compileError(err)
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("%q has type %s, not bool", src, t)
	}
	return e.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
}

// compileError is CEL's error on one line per issue, without the
// excerpt of the source it draws under each.
func compileError(err error) error {
	var msgs []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if rest, ok := strings.CutPrefix(line, "ERROR: <input>:"); ok {
			msgs = append(msgs, rest)
		}
	}
	if len(msgs) == 0 {
		return err
	}
	return errors.New(strings.Join(msgs, "; "))
}

// check judges obj: InProgress while its controller has not observed its
// generation yet, else by the first of failed, current and inProgress
// that is true, else InProgress. An expression that cannot be evaluated
// (a field it reads is missing) leaves the object Unknown.
func (r *rule) check(obj *unstructured.Unstructured) Result {
	if res, ok := generationPending(obj); ok {
		return res
	}
	vars := map[string]any{"self": obj.Object}
	for i, p := range r.exprs {
		if p == nil {
			continue
		}
		name := ruleOrder[i].name
		out, _, err := p.Eval(vars)
		if err != nil {
			return Result{Status: Unknown, Message: fmt.Sprintf("%s.%s: %v", r.field, name, err)}
		}
		b, ok := out.(types.Bool)
		if !ok {
			return Result{Status: Unknown, Message: fmt.Sprintf("%s.%s: the result is a %s, not a bool", r.field, name, out.Type())}
		}
		if b {
			msg := fmt.Sprintf("%s.%s is true", r.field, name)
			if m := conditionMessage(obj); m != "" && ruleOrder[i].status != Current {
				msg = m
			}
			return Result{Status: ruleOrder[i].status, Message: msg}
		}
	}
	return Result{Status: InProgress, Message: fmt.Sprintf("%s: no expression is true", r.field)}
}

// generationPending reports an object whose status.observedGeneration is
// behind its metadata.generation: its controller has not seen the last
// change yet, whatever the rest of its status says.
func generationPending(obj *unstructured.Unstructured) (Result, bool) {
	gen, ok, err := unstructured.NestedInt64(obj.Object, "metadata", "generation")
	if !ok || err != nil {
		return Result{}, false
	}
	observed, ok, err := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	if !ok || err != nil || observed == gen {
		return Result{}, false
	}
	return Result{Status: InProgress, Message: fmt.Sprintf("generation %d is not observed yet (%d is)", gen, observed)}, true
}

// conditionMessage is the message of the object's Ready condition, else
// of its first condition with one: the object's own word on its health.
func conditionMessage(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var first string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		msg, _ := m["message"].(string)
		if msg == "" {
			continue
		}
		if m["type"] == "Ready" {
			return msg
		}
		if first == "" {
			first = msg
		}
	}
	return first
}
