package crd

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifestsync/manifestsync/operator/config"
)

// JSONSchemaDraft is the dialect JSONSchema writes.
const JSONSchemaDraft = "https://json-schema.org/draft/2020-12/schema"

// ManifestSyncJSONSchema returns the JSON Schema of a ManifestSync
// resource file, from the CRD embedded in the binary: what editors read
// (yaml-language-server's `# yaml-language-server: $schema=...`) to
// complete and check sync.yaml.
func ManifestSyncJSONSchema() ([]byte, error) {
	return JSONSchema(config.ManifestSyncCRD, "")
}

// JSONSchema converts the OpenAPI v3 schema of one version of the CRD in
// crdYAML ("" for the storage version) into a JSON Schema (draft 2020-12)
// of the resource as a user writes it: apiVersion and kind fixed, the
// metadata a file sets, the spec, no status. Unknown fields are rejected
// where the API server's strict field validation rejects them (objects
// without x-kubernetes-preserve-unknown-fields), nullable and
// x-kubernetes-int-or-string become JSON Schema types, and the other
// x-kubernetes-* extensions, which JSON Schema cannot say (CEL rules,
// list types), are left out: engine vet checks them.
func JSONSchema(crdYAML []byte, version string) ([]byte, error) {
	crd, ver, err := decodeVersion(crdYAML, version)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(ver.Schema.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("crd %s: %w", crd.Name, err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("crd %s: %w", crd.Name, err)
	}
	root = toJSONSchema(root)
	props, _ := root["properties"].(map[string]any)
	if props == nil {
		return nil, fmt.Errorf("crd %s: version %s: the schema has no properties", crd.Name, ver.Name)
	}
	delete(props, "status")
	apiVersion := crd.Spec.Group + "/" + ver.Name
	props["apiVersion"] = map[string]any{"const": apiVersion, "description": "The API group and version: " + apiVersion + "."}
	props["kind"] = map[string]any{"const": crd.Spec.Names.Kind}
	props["metadata"] = objectMeta(crd.Spec.Scope == "Namespaced")
	required := []any{"apiVersion", "kind", "metadata"}
	if _, ok := props["spec"]; ok {
		required = append(required, "spec")
	}
	root["required"] = required
	root["additionalProperties"] = false
	out := map[string]any{
		"$schema": JSONSchemaDraft,
		"title":   crd.Spec.Names.Kind + " (" + apiVersion + ")",
	}
	for k, v := range root {
		out[k] = v
	}
	b, err = json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("crd %s: %w", crd.Name, err)
	}
	return append(b, '\n'), nil
}

// objectMeta is the schema of the metadata a resource file sets; other
// fields of ObjectMeta are allowed, unchecked.
func objectMeta(namespaced bool) map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	strMap := func(desc string) map[string]any {
		return map[string]any{"type": "object", "description": desc, "additionalProperties": map[string]any{"type": "string"}}
	}
	props := map[string]any{
		"name":        str("The resource's name, unique in its namespace."),
		"labels":      strMap("Labels of the resource."),
		"annotations": strMap("Annotations of the resource."),
	}
	if namespaced {
		props["namespace"] = str("The resource's namespace; kubectl's current one when unset.")
	}
	return map[string]any{"type": "object", "required": []any{"name"}, "properties": props}
}

// toJSONSchema converts one OpenAPI v3 schema node (as JSON) and its
// children.
func toJSONSchema(s map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		switch k {
		case "properties", "patternProperties", "definitions":
			m, _ := v.(map[string]any)
			conv := make(map[string]any, len(m))
			for name, sub := range m {
				conv[name] = toJSONSchema(sub.(map[string]any))
			}
			out[k] = conv
		case "items", "not", "additionalItems", "additionalProperties":
			// A schema, or a bool for additionalProperties.
			if sub, ok := v.(map[string]any); ok {
				out[k] = toJSONSchema(sub)
			} else {
				out[k] = v
			}
		case "allOf", "anyOf", "oneOf":
			list, _ := v.([]any)
			conv := make([]any, len(list))
			for i, sub := range list {
				conv[i] = toJSONSchema(sub.(map[string]any))
			}
			out[k] = conv
		case "nullable":
			// below, with type
		default:
			if strings.HasPrefix(k, "x-kubernetes-") {
				continue
			}
			out[k] = v
		}
	}
	if s["x-kubernetes-int-or-string"] == true {
		out["anyOf"] = []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}
	}
	if s["type"] == "object" && s["x-kubernetes-preserve-unknown-fields"] != true {
		if _, ok := s["additionalProperties"]; !ok {
			if _, ok := s["properties"]; ok {
				out["additionalProperties"] = false
			}
		}
	}
	if s["nullable"] == true {
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
	}
	return out
}
