// Package crd validates custom resources against their
// CustomResourceDefinition the way the Kubernetes API server does when one
// is created: unknown fields are rejected (kubectl's default, strict field
// validation), the structural schema prunes and defaults, and then the
// OpenAPI schema, the list-type invariants and the CEL
// x-kubernetes-validations rules are checked, all with the code of
// k8s.io/apiextensions-apiserver. `engine vet` uses it to reject in CI what
// the cluster would reject on apply; ManifestSync returns the validator for
// the CRD embedded from operator/config.
//
// It runs offline: it must not import client-go or controller-runtime.
package crd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/operation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/operator/config"
)

// Rules name the check an Error comes from; they are stable identifiers for
// reports (SARIF rule ids).
const (
	// RuleType is a wrong apiVersion or kind.
	RuleType = "crd/type"
	// RuleStrict is a field the schema does not know: the API server
	// rejects it under strict field validation (kubectl's default) and
	// drops it otherwise.
	RuleStrict = "crd/unknown-field"
	// RuleMetadata is invalid object metadata (name, labels, ...).
	RuleMetadata = "crd/metadata"
	// RuleSchema is the OpenAPI schema: types, enums, required fields,
	// bounds.
	RuleSchema = "crd/schema"
	// RuleList is a list-type invariant: duplicate keys in a
	// x-kubernetes-list-type map, duplicate items in a set.
	RuleList = "crd/list-type"
	// RuleCEL is a CEL x-kubernetes-validations rule.
	RuleCEL = "crd/cel"
)

// Error is one way an object breaks its CRD.
type Error struct {
	// Field is the path of the offending field, such as "spec.sources[0]"
	// or "metadata.labels[app.kubernetes.io/name]"; empty for the whole
	// object.
	Field string
	// Rule is the check that failed: one of the Rule constants.
	Rule string
	// Msg says what is wrong, without the field, as the API server
	// words it: `Unsupported value: "Foo": supported values: "Sync", "Keep"`.
	Msg string
}

func (e Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Validator validates objects of one version of one CRD. It is safe for
// concurrent use.
type Validator struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	dropStatus bool // the status subresource is enabled: create ignores status
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator // nil when the schema has no CEL rules
}

var manifestSync = sync.OnceValues(func() (*Validator, error) {
	return New(config.ManifestSyncCRD, "")
})

// ManifestSync returns the validator of the ManifestSync CRD embedded in
// the binary (operator/config), built once.
func ManifestSync() (*Validator, error) {
	return manifestSync()
}

// New builds a validator for one version of the CRD in crdYAML (YAML or
// JSON, one document); version "" means the storage version.
func New(crdYAML []byte, version string) (*Validator, error) {
	crd, ver, err := decodeVersion(crdYAML, version)
	if err != nil {
		return nil, err
	}
	// As the API server does (customresource_handler.go): the internal
	// schema, its structural form with the defaults pruned, and the
	// validators built from them.
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(ver.Schema, internal, nil); err != nil {
		return nil, fmt.Errorf("crd %s: version %s: converting the schema: %w", crd.Name, ver.Name, err)
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("crd %s: version %s: schema is not structural: %w", crd.Name, ver.Name, err)
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("crd %s: version %s: pruning defaults: %w", crd.Name, ver.Name, err)
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("crd %s: version %s: %w", crd.Name, ver.Name, err)
	}
	return &Validator{
		gvk:        schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind},
		namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		dropStatus: ver.Subresources != nil && ver.Subresources.Status != nil,
		structural: s,
		schema:     sv,
		// Compiling the rules may fail (the CRD would be rejected by the
		// API server); the validator then reports the compilation
		// errors on every object.
		cel: cel.NewValidator(s, true, celconfig.PerCallLimit),
	}, nil
}

// decodeCRD reads one CustomResourceDefinition, rejecting unknown fields
// so that a typo in the CRD is not silently ignored.
// decodeVersion decodes a CRD and finds its version named version ("" for
// the storage version), which must have a schema.
func decodeVersion(crdYAML []byte, version string) (*apiextensionsv1.CustomResourceDefinition, *apiextensionsv1.CustomResourceDefinitionVersion, error) {
	crd, err := decodeCRD(crdYAML)
	if err != nil {
		return nil, nil, err
	}
	var ver *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Name == version || (version == "" && v.Storage) {
			ver = v
			break
		}
	}
	if ver == nil {
		if version == "" {
			return nil, nil, fmt.Errorf("crd %s: no storage version", crd.Name)
		}
		return nil, nil, fmt.Errorf("crd %s: no version %q", crd.Name, version)
	}
	if ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
		return nil, nil, fmt.Errorf("crd %s: version %s has no schema", crd.Name, ver.Name)
	}
	return crd, ver, nil
}

func decodeCRD(b []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	b = bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n"))
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		return nil, fmt.Errorf("decoding the crd: %w", err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.APIVersion != apiextensionsv1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("decoding the crd: got %s %s, want %s CustomResourceDefinition", crd.APIVersion, crd.Kind, apiextensionsv1.SchemeGroupVersion)
	}
	return crd, nil
}

// GroupVersionKind is the kind the validator checks.
func (v *Validator) GroupVersionKind() schema.GroupVersionKind { return v.gvk }

// Validate checks obj as the API server checks a create request, and returns
// the object as it would be stored (unknown fields pruned, defaults filled,
// status dropped when it is a subresource) with every error found. obj is
// JSON-shaped (as decoded from YAML or JSON) and is not modified. A missing
// metadata.namespace is not an error: kubectl fills it in from its context.
//
// Like the API server, Validate skips the CEL rules when the object already
// breaks the schema in a way that would make them fail confusingly (a
// wrong type, a missing required field), and says so in an error.
func (v *Validator) Validate(ctx context.Context, obj map[string]any) (map[string]any, []Error, error) {
	u, err := jsonCopy(obj)
	if err != nil {
		return nil, nil, err
	}
	var errs []Error
	add := func(rule string, list field.ErrorList) {
		for _, e := range list {
			errs = append(errs, fromField(rule, e))
		}
	}

	// Type meta, checked first: an object of another kind is not checked
	// further (customresource.Validate).
	kind, _ := u["kind"].(string)
	apiVersion, _ := u["apiVersion"].(string)
	if kind != v.gvk.Kind {
		errs = append(errs, Error{Field: "kind", Rule: RuleType, Msg: fmt.Sprintf("Invalid value: %q: must be %s", kind, v.gvk.Kind)})
	}
	if gv := v.gvk.GroupVersion().String(); apiVersion != gv {
		errs = append(errs, Error{Field: "apiVersion", Rule: RuleType, Msg: fmt.Sprintf("Invalid value: %q: must be %s", apiVersion, gv)})
	}
	if len(errs) > 0 {
		return u, errs, nil
	}

	// Decoding (unstructuredSchemaCoercer.apply): unknown fields of
	// metadata and of the schema are pruned and reported.
	meta, hasMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return u, []Error{{Field: "metadata", Rule: RuleMetadata, Msg: err.Error()}}, nil
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(u, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u, v.structural)
	coerceErr, paths := schemaobjectmeta.CoerceWithOptions(nil, u, v.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	unknown = append(unknown, paths...)
	for _, p := range unknown {
		errs = append(errs, Error{Field: p, Rule: RuleStrict, Msg: fmt.Sprintf("unknown field %q", p)})
	}
	if coerceErr != nil {
		errs = append(errs, fromField(RuleMetadata, coerceErr))
	}
	u["kind"], u["apiVersion"] = kind, apiVersion
	if hasMeta {
		if err := schemaobjectmeta.SetObjectMeta(u, meta); err != nil {
			return u, nil, fmt.Errorf("restoring metadata: %w", err)
		}
	}

	// Defaulting, then the create strategy.
	structuraldefaulting.Default(u, v.structural)
	if v.dropStatus {
		delete(u, "status")
	}
	if hasMeta {
		m := meta.DeepCopy()
		if m.Name == "" && m.GenerateName != "" {
			m.Name = m.GenerateName + "x0000" // as the registry generates before validating
		}
		if v.namespaced && m.Namespace == "" {
			m.Namespace = "default" // filled from the request
		}
		add(RuleMetadata, metavalidation.ValidateObjectMetaDeclaratively(ctx, operation.Create, m, nil, v.namespaced,
			metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta)))
	} else {
		errs = append(errs, Error{Field: "metadata.name", Rule: RuleMetadata, Msg: "Required value: name or generateName is required"})
	}
	var schemaErrs field.ErrorList
	for _, check := range []struct {
		rule string
		errs field.ErrorList
	}{
		{RuleSchema, apiservervalidation.ValidateCustomResource(nil, u, v.schema)},
		{RuleMetadata, schemaobjectmeta.Validate(ctx, nil, u, v.structural, false)},
		{RuleList, structurallisttype.ValidateListSetsAndMaps(nil, v.structural, u)},
	} {
		add(check.rule, check.errs)
		schemaErrs = append(schemaErrs, check.errs...)
	}
	if v.cel != nil {
		if blocking(schemaErrs) {
			errs = append(errs, Error{Rule: RuleCEL, Msg: "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"})
		} else {
			celErrs, _ := v.cel.Validate(ctx, nil, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
			add(RuleCEL, celErrs)
		}
	}
	return u, errs, nil
}

// blocking reports whether errs keep the API server from running the CEL
// rules (customresource.hasBlockingErr).
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// fromField converts a field.Error. A CEL rule's error carries the whole
// object as its value ("Invalid value: "object": ..."), which says nothing;
// only its message is kept.
func fromField(rule string, e *field.Error) Error {
	msg := e.ErrorBody()
	if rule == RuleCEL && e.Type == field.ErrorTypeInvalid && e.Detail != "" {
		msg = e.Detail
	}
	return Error{Field: e.Field, Rule: rule, Msg: msg}
}

// jsonCopy deep-copies obj into the shapes the API server decodes JSON
// into: map[string]any, []any, string, bool, int64, float64 and nil.
func jsonCopy(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the object: %w", err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	if out == nil {
		return nil, errors.New("the object is null")
	}
	return out, nil
}
