package stdlib

import (
	"encoding/base64"
	"fmt"
	"path"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"k8s.io/apimachinery/pkg/labels"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// K8s is the Starlark module k8s: helpers for Kubernetes objects, which
// scripts handle as plain dicts (apiVersion, kind, metadata, ...).
//
//	k8s.object(api_version, kind, name, namespace=None, labels=None, annotations=None, **fields) -> dict
//	k8s.config_map(name, data={}, namespace=None, labels=None, annotations=None) -> dict
//	k8s.secret(name, string_data=None, data=None, type="Opaque", namespace=None, labels=None, annotations=None) -> dict
//
//	k8s.name(obj) k8s.namespace(obj) k8s.kind(obj) k8s.api_version(obj) k8s.group(obj) -> str
//	k8s.labels(obj) k8s.annotations(obj) -> dict
//	k8s.match(obj, kind=None, name=None, namespace=None, api_version=None, labels=None) -> bool
//
//	k8s.merge_patch(obj, patch) -> dict             # RFC 7386
//	k8s.strategic_merge(obj, patch) -> dict | None  # kustomize's strategic merge
//	k8s.json_patch(obj, ops) -> dict                # RFC 6902
//	k8s.set_labels(obj, labels) -> dict
//	k8s.set_annotations(obj, annotations) -> dict
//
// Every function returns a new dict (keys sorted) and leaves its arguments
// unchanged. The patch functions are the ones the engine uses for a target's
// static patches: MergePatch, StrategicMerge and JSONPatch.
var K8s = &starlarkstruct.Module{
	Name: "k8s",
	Members: starlark.StringDict{
		"object":          newBuiltin("k8s.object", k8sObject),
		"config_map":      newBuiltin("k8s.config_map", k8sConfigMap),
		"secret":          newBuiltin("k8s.secret", k8sSecret),
		"name":            metadataString("k8s.name", "metadata", "name"),
		"namespace":       metadataString("k8s.namespace", "metadata", "namespace"),
		"kind":            metadataString("k8s.kind", "kind"),
		"api_version":     metadataString("k8s.api_version", "apiVersion"),
		"group":           newBuiltin("k8s.group", k8sGroup),
		"labels":          metadataMap("k8s.labels", "labels"),
		"annotations":     metadataMap("k8s.annotations", "annotations"),
		"match":           newBuiltin("k8s.match", k8sMatch),
		"merge_patch":     newBuiltin("k8s.merge_patch", k8sMergePatch),
		"strategic_merge": newBuiltin("k8s.strategic_merge", k8sStrategicMerge),
		"json_patch":      newBuiltin("k8s.json_patch", k8sJSONPatch),
		"set_labels":      setMetadataMap("k8s.set_labels", "labels"),
		"set_annotations": setMetadataMap("k8s.set_annotations", "annotations"),
	},
}

var k8sModule = Module{
	Name:  "k8s",
	Doc:   "Helpers for Kubernetes objects, which scripts handle as plain dicts: constructors, metadata accessors, a selector-style match, and the three patch kinds (merge, strategic merge, JSON patch) exactly as the engine applies a target's static patches. Every function returns a new dict and leaves its arguments unchanged.",
	Value: K8s,
	Funcs: []Func{
		{"object", "k8s.object(api_version, kind, name, namespace=None, labels=None, annotations=None, **fields) -> dict", "Returns a new object with the given apiVersion, kind and metadata; every other keyword becomes a top-level field (spec=..., data=..., rules=...). A metadata= keyword gives extra metadata, over which name, namespace, labels and annotations are set."},
		{"config_map", "k8s.config_map(name, data={}, namespace=None, labels=None, annotations=None) -> dict", "Returns a v1 ConfigMap whose data is the given dict of strings (omitted when empty)."},
		{"secret", `k8s.secret(name, string_data=None, data=None, type="Opaque", namespace=None, labels=None, annotations=None) -> dict`, "Returns a v1 Secret of the given type. data holds values that are already base64-encoded, as in a Secret's YAML, and is copied as is (each value must be valid base64); string_data holds plain str or bytes values, which the helper base64-encodes into data. The result has no stringData field, so it reads back from the cluster unchanged. A key in both is an error."},
		{"name", "k8s.name(obj) -> str", `Returns metadata.name, or "" when it is unset.`},
		{"namespace", "k8s.namespace(obj) -> str", `Returns metadata.namespace, or "" when it is unset (as for cluster-scoped objects).`},
		{"kind", "k8s.kind(obj) -> str", `Returns kind, or "" when it is unset.`},
		{"api_version", "k8s.api_version(obj) -> str", `Returns apiVersion ("apps/v1"), or "" when it is unset.`},
		{"group", "k8s.group(obj) -> str", `Returns the API group of apiVersion: "apps" for "apps/v1", "" for the core group ("v1").`},
		{"labels", "k8s.labels(obj) -> dict", "Returns a new dict of metadata.labels, empty when there are none."},
		{"annotations", "k8s.annotations(obj) -> dict", "Returns a new dict of metadata.annotations, empty when there are none."},
		{"match", "k8s.match(obj, kind=None, name=None, namespace=None, api_version=None, labels=None) -> bool", `Reports whether obj satisfies every given criterion. kind and api_version must equal the object's; name and namespace are shell globs ("web-*"; namespace="" matches cluster-scoped objects); labels is either a dict whose pairs must all be present or a label-selector string such as "app=web,tier in (fe,be),!canary".`},
		{"merge_patch", "k8s.merge_patch(obj, patch) -> dict", "Applies a JSON merge patch (RFC 7386): dicts merge recursively, a None value deletes its key, and any other value (lists included) replaces the old one."},
		{"strategic_merge", "k8s.strategic_merge(obj, patch) -> dict | None", `Applies a strategic merge patch with kustomize's semantics: lists of known Kubernetes kinds merge by key (containers by name, ...), other lists are replaced, and None deletes a field. "$patch": "delete" in a dict removes it (or the list element with its key), "$patch": "replace" replaces the dict, and a {"$patch": "replace"} element replaces a whole list. Returns None when the patch deletes the whole object.`},
		{"json_patch", "k8s.json_patch(obj, ops) -> dict", `Applies a JSON patch (RFC 6902): ops is a list of dicts such as {"op": "replace", "path": "/spec/replicas", "value": 3}, applied in order. Errors name the failing op by its index from 0.`},
		{"set_labels", "k8s.set_labels(obj, labels) -> dict", "Returns obj with the given labels merged over metadata.labels; a None value removes that label. Only metadata is changed, not pod templates."},
		{"set_annotations", "k8s.set_annotations(obj, annotations) -> dict", "Returns obj with the given annotations merged over metadata.annotations; a None value removes that annotation."},
	},
}

// objectArgs are the arguments shared by the constructors.
type objectArgs struct {
	name        string
	namespace   string
	labels      starlark.Value
	annotations starlark.Value
}

// metadata builds an object's metadata from the constructor's arguments,
// over base (which it does not modify).
func (a objectArgs) metadata(base map[string]any) (map[string]any, error) {
	if a.name == "" {
		return nil, fmt.Errorf("name must not be empty")
	}
	md := make(map[string]any, len(base)+4)
	for k, v := range base {
		md[k] = v
	}
	md["name"] = a.name
	if a.namespace != "" {
		md["namespace"] = a.namespace
	}
	for _, f := range []struct {
		key string
		v   starlark.Value
	}{{"labels", a.labels}, {"annotations", a.annotations}} {
		m, err := toStringMap(f.key, f.v, false)
		if err != nil {
			return nil, err
		}
		if len(m) > 0 {
			md[f.key] = m
		}
	}
	return md, nil
}

// objectParams are the named parameters of k8s.object; any other keyword
// argument is a field of the object.
var objectParams = map[string]bool{
	"api_version": true, "kind": true, "name": true,
	"namespace": true, "labels": true, "annotations": true,
}

func k8sObject(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var params []starlark.Tuple
	fields := make(map[string]any)
	for _, kv := range kwargs {
		key := string(kv[0].(starlark.String))
		if objectParams[key] {
			params = append(params, kv)
			continue
		}
		if key == "apiVersion" {
			return nil, fmt.Errorf("apiVersion: use the api_version argument")
		}
		v, err := lstar.FromValue(kv[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		fields[key] = v
	}

	var (
		apiVersion, kind string
		a                objectArgs
	)
	if err := starlark.UnpackArgs(b.Name(), args, params,
		"api_version", &apiVersion, "kind", &kind, "name", &a.name,
		"namespace??", &a.namespace, "labels??", &a.labels, "annotations??", &a.annotations); err != nil {
		return nil, err
	}
	if apiVersion == "" || kind == "" {
		return nil, fmt.Errorf("api_version and kind must not be empty")
	}
	var base map[string]any
	if md, ok := fields["metadata"]; ok {
		if base, ok = md.(map[string]any); !ok {
			return nil, fmt.Errorf("metadata: got %s, want dict", typeName(md))
		}
	}
	md, err := a.metadata(base)
	if err != nil {
		return nil, err
	}
	fields["apiVersion"] = apiVersion
	fields["kind"] = kind
	fields["metadata"] = md
	return lstar.ToValue(fields)
}

func k8sConfigMap(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		a    objectArgs
		data starlark.Value
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &a.name, "data??", &data,
		"namespace??", &a.namespace, "labels??", &a.labels, "annotations??", &a.annotations); err != nil {
		return nil, err
	}
	md, err := a.metadata(nil)
	if err != nil {
		return nil, err
	}
	values, err := toStringMap("data", data, false)
	if err != nil {
		return nil, err
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}
	if len(values) > 0 {
		obj["data"] = values
	}
	return lstar.ToValue(obj)
}

func k8sSecret(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		a                   objectArgs
		stringData, encoded starlark.Value
		typ                 = "Opaque"
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &a.name,
		"string_data??", &stringData, "data??", &encoded, "type?", &typ,
		"namespace??", &a.namespace, "labels??", &a.labels, "annotations??", &a.annotations); err != nil {
		return nil, err
	}
	md, err := a.metadata(nil)
	if err != nil {
		return nil, err
	}
	data, err := toStringMap("data", encoded, false)
	if err != nil {
		return nil, err
	}
	if data == nil {
		data = make(map[string]any)
	}
	for _, k := range sortedKeys(data) {
		if _, err := base64.StdEncoding.DecodeString(data[k].(string)); err != nil {
			return nil, fmt.Errorf("data[%q]: not valid base64 (plain text goes in string_data): %w", k, err)
		}
	}
	plain, err := toStringMap("string_data", stringData, false)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(plain) {
		if _, dup := data[k]; dup {
			return nil, fmt.Errorf("key %q is in both data and string_data", k)
		}
		data[k] = base64.StdEncoding.EncodeToString([]byte(plain[k].(string)))
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": md, "type": typ}
	if len(data) > 0 {
		obj["data"] = data
	}
	return lstar.ToValue(obj)
}

// lookup returns the value at path in an object (a dict or struct), or nil
// when some step is missing or None.
func lookup(obj starlark.Value, path ...string) (starlark.Value, error) {
	v := obj
	for i, key := range path {
		var (
			next  starlark.Value
			found bool
			err   error
		)
		switch m := v.(type) {
		case starlark.Mapping:
			next, found, err = m.Get(starlark.String(key))
		case *starlarkstruct.Struct:
			next, err = m.Attr(key)
			found = err == nil && next != nil
			err = nil
		default:
			if i == 0 {
				return nil, fmt.Errorf("got %s, want dict", v.Type())
			}
			return nil, fmt.Errorf("%s: got %s, want dict", strings.Join(path[:i], "."), v.Type())
		}
		if err != nil {
			return nil, err
		}
		if !found || next == starlark.None {
			return nil, nil
		}
		v = next
	}
	return v, nil
}

// lookupString returns the string at path in obj, "" when it is unset.
func lookupString(obj starlark.Value, path ...string) (string, error) {
	v, err := lookup(obj, path...)
	if err != nil || v == nil {
		return "", err
	}
	s, ok := v.(starlark.String)
	if !ok {
		return "", fmt.Errorf("%s: got %s, want string", strings.Join(path, "."), v.Type())
	}
	return string(s), nil
}

// lookupStringMap returns the dict of strings at metadata.<field> in obj,
// nil when it is unset.
func lookupStringMap(obj starlark.Value, field string) (map[string]any, error) {
	v, err := lookup(obj, "metadata", field)
	if err != nil || v == nil {
		return nil, err
	}
	return toStringMap("metadata."+field, v, false)
}

// metadataString returns a built-in that reads the string at path.
func metadataString(name string, path ...string) *starlark.Builtin {
	return newBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var obj starlark.Value
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &obj); err != nil {
			return nil, err
		}
		s, err := lookupString(obj, path...)
		if err != nil {
			return nil, err
		}
		return starlark.String(s), nil
	})
}

// metadataMap returns a built-in that copies the dict at metadata.<field>.
func metadataMap(name, field string) *starlark.Builtin {
	return newBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var obj starlark.Value
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &obj); err != nil {
			return nil, err
		}
		m, err := lookupStringMap(obj, field)
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = map[string]any{}
		}
		return lstar.ToValue(m)
	})
}

func k8sGroup(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var obj starlark.Value
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &obj); err != nil {
		return nil, err
	}
	apiVersion, err := lookupString(obj, "apiVersion")
	if err != nil {
		return nil, err
	}
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = "" // the core group: "v1"
	}
	return starlark.String(group), nil
}

func k8sMatch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var obj, kind, name, namespace, apiVersion, selector starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj", &obj,
		"kind??", &kind, "name??", &name, "namespace??", &namespace,
		"api_version??", &apiVersion, "labels??", &selector); err != nil {
		return nil, err
	}
	criteria := []struct {
		param string
		value starlark.Value
		path  []string
		glob  bool
	}{
		{"kind", kind, []string{"kind"}, false},
		{"api_version", apiVersion, []string{"apiVersion"}, false},
		{"name", name, []string{"metadata", "name"}, true},
		{"namespace", namespace, []string{"metadata", "namespace"}, true},
	}
	for _, c := range criteria {
		if c.value == nil {
			continue
		}
		want, ok := starlark.AsString(c.value)
		if !ok {
			return nil, fmt.Errorf("%s: got %s, want string", c.param, c.value.Type())
		}
		got, err := lookupString(obj, c.path...)
		if err != nil {
			return nil, err
		}
		matched := got == want
		if c.glob {
			if matched, err = path.Match(want, got); err != nil {
				return nil, fmt.Errorf("%s: bad pattern %q: %w", c.param, want, err)
			}
		}
		if !matched {
			return starlark.False, nil
		}
	}
	if selector == nil {
		return starlark.True, nil
	}
	sel, err := labelSelector(selector)
	if err != nil {
		return nil, err
	}
	objLabels, err := lookupStringMap(obj, "labels")
	if err != nil {
		return nil, err
	}
	set := make(labels.Set, len(objLabels))
	for k, v := range objLabels {
		set[k] = v.(string)
	}
	return starlark.Bool(sel.Matches(set)), nil
}

// labelSelector reads k8s.match's labels argument: a selector string, or a
// dict of labels that must all be present.
func labelSelector(v starlark.Value) (labels.Selector, error) {
	if s, ok := starlark.AsString(v); ok {
		sel, err := labels.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("labels: %w", err)
		}
		return sel, nil
	}
	if _, ok := v.(starlark.IterableMapping); !ok {
		return nil, fmt.Errorf("labels: got %s, want dict or selector string", v.Type())
	}
	m, err := toStringMap("labels", v, false)
	if err != nil {
		return nil, err
	}
	set := make(labels.Set, len(m))
	for k, v := range m {
		set[k] = v.(string)
	}
	return labels.SelectorFromSet(set), nil
}

func k8sMergePatch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	obj, patch, err := objectAndPatch(b, args, kwargs)
	if err != nil {
		return nil, err
	}
	out, err := MergePatch(obj, patch)
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(out)
}

func k8sStrategicMerge(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	obj, patch, err := objectAndPatch(b, args, kwargs)
	if err != nil {
		return nil, err
	}
	out, err := StrategicMerge(obj, patch)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return starlark.None, nil // "$patch: delete" removed the object
	}
	return lstar.ToValue(out)
}

// objectAndPatch reads the (obj, patch) arguments of the patch functions.
func objectAndPatch(b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (obj, patch map[string]any, err error) {
	var objV, patchV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj", &objV, "patch", &patchV); err != nil {
		return nil, nil, err
	}
	if obj, err = toMap("obj", objV); err != nil {
		return nil, nil, err
	}
	if patch, err = toMap("patch", patchV); err != nil {
		return nil, nil, err
	}
	return obj, patch, nil
}

func k8sJSONPatch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var objV, opsV starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj", &objV, "ops", &opsV); err != nil {
		return nil, err
	}
	obj, err := toMap("obj", objV)
	if err != nil {
		return nil, err
	}
	ops, err := toList("ops", opsV)
	if err != nil {
		return nil, err
	}
	out, err := JSONPatch(obj, ops)
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(out)
}

// setMetadataMap returns a built-in that merges a dict of strings over
// metadata.<field>, deleting the keys whose new value is None.
func setMetadataMap(name, field string) *starlark.Builtin {
	return newBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var objV, valuesV starlark.Value
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj", &objV, field, &valuesV); err != nil {
			return nil, err
		}
		obj, err := toMap("obj", objV) // a fresh copy, ours to change
		if err != nil {
			return nil, err
		}
		if valuesV == starlark.None {
			return nil, fmt.Errorf("%s: got NoneType, want dict", field)
		}
		values, err := toStringMap(field, valuesV, true)
		if err != nil {
			return nil, err
		}
		md, ok := obj["metadata"].(map[string]any)
		if !ok {
			if obj["metadata"] != nil {
				return nil, fmt.Errorf("obj: metadata: got %s, want dict", typeName(obj["metadata"]))
			}
			md = make(map[string]any)
			obj["metadata"] = md
		}
		current, ok := md[field].(map[string]any)
		if !ok {
			if md[field] != nil {
				return nil, fmt.Errorf("obj: metadata.%s: got %s, want dict", field, typeName(md[field]))
			}
			current = make(map[string]any)
		}
		for k, v := range values {
			if v == nil {
				delete(current, k)
			} else {
				current[k] = v
			}
		}
		if len(current) > 0 {
			md[field] = current
		} else {
			delete(md, field)
		}
		return lstar.ToValue(obj)
	})
}
