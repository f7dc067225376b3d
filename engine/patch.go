package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/stdlib"
)

// patch is a target's static override, parsed: a strategic-merge patch (an
// object) or a JSON6902 patch (a list of operations).
type patch struct {
	merge map[string]any
	ops   []any
	sel   *selector
}

// MayBeStrategicMerge reports whether the text of a patch may be a
// strategic-merge patch (a YAML object), which takes kustomize to apply:
// the lean operator (internal/lean) evaluates a spec with one in its
// workers. It reads the patch's first token, never the whole patch, so
// that the operator parses no patch to route it: false only when that
// token opens a sequence ("- " or "["), as a JSON6902 patch does.
func MayBeStrategicMerge(patch string) bool {
	for rest := patch; rest != ""; {
		line, next, _ := strings.Cut(rest, "\n")
		rest = next
		t := strings.TrimSpace(line)
		switch {
		case t == "" || strings.HasPrefix(t, "#") || t == "---":
			continue
		case t == "-" || strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "-\t") || strings.HasPrefix(t, "["):
			return false
		}
		return true
	}
	return true
}

func parsePatch(p v1alpha1.Patch) (*patch, error) {
	var v any
	if err := yaml.Unmarshal([]byte(p.Patch), &v); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	out := &patch{}
	switch v := v.(type) {
	case map[string]any:
		out.merge = v
		if p.Target == nil {
			// Like kustomize: a strategic-merge patch without a selector
			// applies to the object it names.
			gv, _ := v["apiVersion"].(string)
			kind, _ := v["kind"].(string)
			name, _ := nestedString(v, "metadata", "name")
			if kind == "" || name == "" {
				return nil, fmt.Errorf("a strategic-merge patch without a target must have kind and metadata.name")
			}
			g, err := schema.ParseGroupVersion(gv)
			if err != nil {
				return nil, fmt.Errorf("apiVersion: %w", err)
			}
			out.sel = &selector{group: &g.Group, version: g.Version, kind: kind, name: regexp.MustCompile("^" + regexp.QuoteMeta(name) + "$")}
		}
	case []any:
		for i, op := range v {
			m, ok := op.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("JSON6902 operation %d: got %T, want an object", i, op)
			}
			if _, ok := m["op"].(string); !ok {
				return nil, fmt.Errorf("JSON6902 operation %d: op is missing", i)
			}
			if _, ok := m["path"].(string); !ok {
				return nil, fmt.Errorf("JSON6902 operation %d: path is missing", i)
			}
		}
		out.ops = v
		if p.Target == nil {
			return nil, fmt.Errorf("a JSON6902 patch needs a target selector")
		}
	default:
		return nil, fmt.Errorf("a patch is an object (strategic merge) or a list (JSON6902), got %T", v)
	}
	if p.Target != nil {
		sel, err := compileSelector(p.Target)
		if err != nil {
			return nil, err
		}
		out.sel = sel
	}
	return out, nil
}

// apply patches every object the selector picks, in place. A patch that
// picks no object is an error: it was meant for something, and a typo in
// its selector must not ship the unpatched objects silently.
func (p *patch) apply(objs []*unstructured.Unstructured) error {
	matched := false
	for _, o := range objs {
		if !p.sel.matches(o) {
			continue
		}
		matched = true
		var (
			res map[string]any
			err error
		)
		if p.merge != nil {
			res, err = stdlib.StrategicMerge(o.Object, p.merge)
		} else {
			res, err = stdlib.JSONPatch(o.Object, p.ops)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", describe(o), err)
		}
		o.Object = res
	}
	if !matched {
		return errNoMatch
	}
	return nil
}

var errNoMatch = errors.New("matches no object")

// selector picks objects; nil fields match everything.
type selector struct {
	group       *string
	version     string
	kind        string
	name, ns    *regexp.Regexp
	labels, ann labels.Selector
}

func compileSelector(s *v1alpha1.PatchSelector) (*selector, error) {
	sel := &selector{version: s.Version, kind: s.Kind}
	if s.Group != "" {
		g := s.Group
		sel.group = &g
	}
	var err error
	if s.Name != "" {
		if sel.name, err = anchored(s.Name); err != nil {
			return nil, fmt.Errorf("name: %w", err)
		}
	}
	if s.Namespace != "" {
		if sel.ns, err = anchored(s.Namespace); err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
	}
	if s.LabelSelector != "" {
		if sel.labels, err = labels.Parse(s.LabelSelector); err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
	}
	if s.AnnotationSelector != "" {
		if sel.ann, err = labels.Parse(s.AnnotationSelector); err != nil {
			return nil, fmt.Errorf("annotationSelector: %w", err)
		}
	}
	return sel, nil
}

// anchored compiles a regular expression that must match a whole name. The
// pattern must be one on its own: "a)|(.*" would otherwise close the
// anchoring group and match every name.
func anchored(pattern string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, err
	}
	return regexp.Compile("^(?:" + pattern + ")$")
}

func (s *selector) matches(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	switch {
	case s.group != nil && *s.group != gvk.Group,
		s.version != "" && s.version != gvk.Version,
		s.kind != "" && s.kind != gvk.Kind,
		s.name != nil && !s.name.MatchString(o.GetName()),
		s.ns != nil && !s.ns.MatchString(o.GetNamespace()),
		s.labels != nil && !s.labels.Matches(labels.Set(o.GetLabels())),
		s.ann != nil && !s.ann.Matches(labels.Set(o.GetAnnotations())):
		return false
	}
	return true
}

func nestedString(m map[string]any, fields ...string) (string, bool) {
	s, ok, _ := unstructured.NestedString(m, fields...)
	return s, ok
}
