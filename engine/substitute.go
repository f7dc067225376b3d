package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/envsubst"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Post-build substitution is Flux's (kustomize-controller's postBuild),
// rule for rule, so that a cluster-vars repository renders here as there:
//
//   - the variables are the data of substituteFrom's ConfigMaps and
//     Secrets in order (a later one wins), then substitute over all; a
//     value's newlines are removed;
//   - every name must match varNamePattern, or nothing is substituted;
//   - with no variable at all nothing is substituted, not even the
//     defaults of ${var:=default};
//   - each object is substituted on its own, as the YAML Flux prints it
//     (sigs.k8s.io/yaml), with Flux's envsubst dialect (${var},
//     ${var:=default}, ${var:-default}, $${var} for a literal ${var}; an
//     unset variable is empty, Flux's default non-strict mode), and read
//     back as YAML (sigs.k8s.io/yaml, so `yes` unquoted is true);
//   - an object labelled or annotated substituteKey: disabled is left
//     as it is.

// varNamePattern is what Flux accepts as a variable's name.
var varNamePattern = regexp.MustCompile(`^[_[:alpha:]][_[:alpha:][:digit:]]*$`)

// substituteKey, as a label or an annotation with the value "disabled",
// keeps an object out of substitution.
const substituteKey = "kustomize.toolkit.fluxcd.io/substitute"

// buildOf is how the objects of s are made: a git, oci or http source's
// build, or a kustomize source's substitution.
func buildOf(s *v1alpha1.Source) v1alpha1.Build {
	switch {
	case s.Git != nil:
		return s.Git.Build
	case s.OCI != nil:
		return s.OCI.Build
	case s.HTTP != nil:
		return s.HTTP.Build
	case s.Kustomize != nil:
		return v1alpha1.Build{Substitute: s.Kustomize.Substitute, SubstituteFrom: s.Kustomize.SubstituteFrom}
	}
	return v1alpha1.Build{}
}

// substituteVars returns the variables of s's substitution from the refs
// its snapshot read; nil when s substitutes nothing (no substitute nor
// substituteFrom, or no variable in them).
func substituteVars(s *v1alpha1.Source, refs map[string]map[string]string) (map[string]string, error) {
	b := buildOf(s)
	vars := map[string]string{}
	for _, ref := range b.SubstituteFrom {
		data, ok := refs[ref.Kind+"/"+ref.Name]
		if !ok {
			if ref.Optional {
				continue
			}
			return nil, fmt.Errorf("source %q: substituteFrom %s/%s was not read", s.Name, ref.Kind, ref.Name)
		}
		for k, v := range data {
			vars[k] = strings.ReplaceAll(v, "\n", "")
		}
	}
	for k, v := range b.Substitute {
		vars[k] = strings.ReplaceAll(v, "\n", "")
	}
	if len(vars) == 0 {
		return nil, nil
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !varNamePattern.MatchString(k) {
			return nil, fmt.Errorf("source %q: substitute: variable name %q is invalid, must match %s", s.Name, k, varNamePattern)
		}
	}
	return vars, nil
}

// substitute substitutes vars in each of objs that allows it, in place.
// What the values add to the objects is bounded by maxBytes in all, so
// that a large value named many times fails instead of filling memory.
func substitute(source string, objs []Input, vars map[string]string, maxBytes int64) error {
	added := int64(0)
	for i := range objs {
		o := objs[i].Object
		if substitutionDisabled(o) {
			continue
		}
		in, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("source %q: %s: %w", source, describe(&unstructured.Unstructured{Object: o}), err)
		}
		over := false
		out, err := envsubst.Eval(string(in), func(name string) (string, bool) {
			v := vars[name]
			if added += int64(len(v)); added > maxBytes {
				over = true
				return "", true
			}
			return v, true
		})
		if over {
			return fmt.Errorf("source %q: %s: substitution adds more than %d bytes to the objects", source, describe(&unstructured.Unstructured{Object: o}), maxBytes)
		}
		if err != nil {
			return fmt.Errorf("source %q: %s: substitution: %w", source, describe(&unstructured.Unstructured{Object: o}), err)
		}
		j, err := yaml.YAMLToJSON([]byte(out))
		if err != nil {
			return fmt.Errorf("source %q: %s: not YAML after substitution: %w", source, describe(&unstructured.Unstructured{Object: o}), err)
		}
		d := json.NewDecoder(bytes.NewReader(j))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil || !isObject(m) {
			return fmt.Errorf("source %q: %s: not an object with apiVersion and kind after substitution", source, describe(&unstructured.Unstructured{Object: o}))
		}
		objs[i].Object = normalizeNumbers(m).(map[string]any)
	}
	return nil
}

// substitutionDisabled tells whether obj is labelled or annotated
// substituteKey: disabled.
func substitutionDisabled(obj map[string]any) bool {
	md, _ := obj["metadata"].(map[string]any)
	for _, field := range []string{"labels", "annotations"} {
		if m, _ := md[field].(map[string]any); m[substituteKey] == "disabled" {
			return true
		}
	}
	return false
}
