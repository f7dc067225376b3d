package engine

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
)

var (
	sourceNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`)
	targetNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
)

// Validate checks the rules of a spec that the CRD enforces in a cluster
// (and a few it cannot), so that an offline evaluation rejects what the API
// server would. Each error names its field; Line and File are left to the
// caller.
func Validate(spec *v1alpha1.ManifestSyncSpec) FieldErrors {
	var errs FieldErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	sources := map[string]*v1alpha1.Source{}
	for i := range spec.Sources {
		s := &spec.Sources[i]
		f := fmt.Sprintf("spec.sources[%d]", i)
		switch {
		case s.Name == "":
			add(f+".name", "must be set")
		case len(s.Name) > 63 || !sourceNameRE.MatchString(s.Name):
			add(f+".name", "%q must be lowercase letters, digits, '-' and '_', at most 63", s.Name)
		case sources[s.Name] != nil:
			add(f+".name", "duplicate source name %q", s.Name)
		}
		sources[s.Name] = s
		n := 0
		if s.Git != nil {
			n++
			if s.Git.URL == "" {
				add(f+".git.url", "must be set")
			}
			if v := s.Git.Verify; v != nil {
				if !slices.Contains([]string{"", "HEAD", "Tag", "TagAndHEAD"}, v.Mode) {
					add(f+".git.verify.mode", "%q must be HEAD, Tag or TagAndHEAD", v.Mode)
				}
				if v.SecretRef.Name == "" {
					add(f+".git.verify.secretRef.name", "must be set")
				}
			}
		}
		if o := s.OCI; o != nil {
			n++
			validateOCI(add, f+".oci", o)
		}
		if h := s.HTTP; h != nil {
			n++
			validateHTTP(add, f+".http", h)
		}
		if s.Object != nil {
			n++
			o := s.Object
			if o.APIVersion == "" || o.Kind == "" || o.Name == "" {
				add(f+".object", "apiVersion, kind and name must be set")
			}
		}
		if s.Objects != nil {
			n++
			if _, err := CompileObjectSet(s.Objects, ""); err != nil {
				add(f+".objects", "%v", err)
			}
		}
		if s.Kustomize != nil {
			n++
		}
		if h := s.Helm; h != nil {
			n++
			validateHelm(add, f+".helm", h)
		}
		if n != 1 {
			add(f, "exactly one of git, oci, http, object, objects, kustomize and helm must be set")
		}
		if s.Cluster != nil && s.Object == nil && s.Objects == nil {
			add(f, "cluster is set only with object or objects")
		}
	}
	for i, s := range spec.Sources {
		if h := s.Helm; h != nil && h.Source != "" {
			f := fmt.Sprintf("spec.sources[%d].helm.source", i)
			switch {
			case h.Source == s.Name:
				add(f, "a helm source cannot read its chart from itself")
			case sources[h.Source] == nil:
				add(f, "no source named %q", h.Source)
			}
		}
		if s.Helm != nil {
			for j, v := range s.Helm.ValuesFrom {
				if v.Source != "" && sources[v.Source] == nil {
					add(fmt.Sprintf("spec.sources[%d].helm.valuesFrom[%d].source", i, j), "no source named %q", v.Source)
				}
			}
		}
		if s.Kustomize == nil {
			continue
		}
		f := fmt.Sprintf("spec.sources[%d].kustomize.source", i)
		switch ref := s.Kustomize.Source; {
		case ref == s.Name:
			add(f, "a kustomize source cannot build from itself")
		case sources[ref] == nil:
			add(f, "no source named %q", ref)
		}
	}
	if t := spec.Transform; t != nil {
		switch {
		case (t.Starlark == nil) == (t.CUE == nil):
			add("spec.transform", "exactly one of starlark and cue must be set")
		case t.Starlark != nil:
			validateProgram(&errs, "spec.transform.starlark", t.Starlark, sources)
		default:
			validateProgram(&errs, "spec.transform.cue", &t.CUE.ProgramRef, sources)
		}
	}
	for i, s := range spec.Schemas {
		f := fmt.Sprintf("spec.schemas[%d]", i)
		switch {
		case (s.Source == "") == (s.Builtin == ""):
			add(f, "exactly one of source and builtin must be set")
		case s.Source != "" && sources[s.Source] == nil:
			add(f+".source", "no source named %q", s.Source)
		}
	}
	if d := spec.Decryption; d != nil {
		if d.Provider != "sops" {
			add("spec.decryption.provider", "%q must be sops", d.Provider)
		}
		if d.SecretRef.Name == "" {
			add("spec.decryption.secretRef.name", "must be set")
		}
	}
	if len(spec.Targets) == 0 {
		add("spec.targets", "at least one target is needed")
	}
	targets := map[string]bool{}
	for i, t := range spec.Targets {
		f := fmt.Sprintf("spec.targets[%d]", i)
		switch {
		case t.Name == "":
			add(f+".name", "must be set")
		case len(t.Name) > 63 || !targetNameRE.MatchString(t.Name):
			add(f+".name", "%q must be lowercase letters, digits, '-', '_' and '.', at most 63", t.Name)
		case targets[t.Name]:
			add(f+".name", "duplicate target name %q", t.Name)
		}
		targets[t.Name] = true
		if t.Namespace != "" && t.NamespaceSelector != nil {
			add(f, "namespace and namespaceSelector are exclusive")
		}
		if msgs := apivalidation.ValidateNamespaceName(t.Namespace, false); t.Namespace != "" && len(msgs) > 0 {
			add(f+".namespace", "%s", invalidName(t.Namespace, msgs))
		}
		for j, p := range t.Patches {
			pf := fmt.Sprintf("%s.patches[%d]", f, j)
			if _, err := parsePatch(p); err != nil {
				add(pf+".patch", "%v", err)
			}
			if p.Target != nil {
				if _, err := compileSelector(p.Target); err != nil {
					add(pf+".target", "%v", err)
				}
			}
		}
	}
	p := spec.Policy
	checkEnum(&errs, "spec.policy.resources", string(p.Resources), "Sync", "Keep", "Adopt", "Overwrite")
	checkEnum(&errs, "spec.policy.deletion", string(p.Deletion), "Delete", "Orphan")
	checkEnum(&errs, "spec.policy.drift", string(p.Drift), "Correct", "Report", "Ignore")
	if _, herrs := health.New(spec.HealthChecks); len(herrs) > 0 {
		for _, e := range herrs {
			add(e.Field, "%s", e.Msg)
		}
	}
	return errs
}

func validateProgram(errs *FieldErrors, f string, p *v1alpha1.ProgramRef, sources map[string]*v1alpha1.Source) {
	add := func(field, format string, args ...any) {
		*errs = append(*errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case (p.Path == "") == (p.Inline == ""):
		add(f, "exactly one of path and inline must be set")
	case p.Path != "" && p.Source == "":
		add(f+".source", "a path needs a source")
	}
	if p.Source != "" && sources[p.Source] == nil {
		add(f+".source", "no source named %q", p.Source)
	}
}

func checkEnum(errs *FieldErrors, field, v string, allowed ...string) {
	if v == "" {
		return
	}
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	*errs = append(*errs, &FieldError{Field: field, Msg: fmt.Sprintf("%q is not one of %v", v, allowed)})
}

// validateHelm checks the field rules of a helm source that the CRD
// states in CEL.
var (
	ociURLRE  = regexp.MustCompile(`^oci://[^/]+/.+`)
	ociTagRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestRE  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	httpURLRE = regexp.MustCompile(`^https?://.+`)
)

// validateOCI checks an oci source as its CRD does.
func validateOCI(add func(field, format string, args ...any), f string, o *v1alpha1.OCISource) {
	if !ociURLRE.MatchString(o.URL) {
		add(f+".url", "%q must be oci://HOST/REPOSITORY", o.URL)
	}
	if o.Ref.Tag != "" && !ociTagRE.MatchString(o.Ref.Tag) {
		add(f+".ref.tag", "%q is not a tag", o.Ref.Tag)
	}
	if o.Ref.Digest != "" && !digestRE.MatchString(o.Ref.Digest) {
		add(f+".ref.digest", "%q must be sha256: and 64 hex digits", o.Ref.Digest)
	}
	if l := o.LayerSelector; l != nil && l.Operation != "" && l.Operation != "extract" && l.Operation != "copy" {
		add(f+".layerSelector.operation", "%q must be extract or copy", l.Operation)
	}
	if v := o.Verify; v != nil {
		if v.Provider != "cosign" {
			add(f+".verify.provider", "%q must be cosign", v.Provider)
		}
		if v.SecretRef.Name == "" {
			add(f+".verify.secretRef.name", "must be set")
		}
	}
}

// validateHTTP checks an http source as its CRD does.
func validateHTTP(add func(field, format string, args ...any), f string, h *v1alpha1.HTTPSource) {
	if !httpURLRE.MatchString(h.URL) {
		add(f+".url", "%q must be an http(s) URL", h.URL)
	}
	switch {
	case h.Digest != "" && !digestRE.MatchString(h.Digest):
		add(f+".digest", "%q must be sha256: and 64 hex digits", h.Digest)
	case h.Digest == "" && !h.Insecure:
		add(f, "digest is required unless insecure is true")
	}
}

func validateHelm(add func(field, format string, args ...any), f string, h *v1alpha1.HelmSource) {
	switch {
	case (h.Chart == "") == (h.Source == ""):
		add(f, "exactly one of chart and source must be set")
	case h.Chart != "" && h.Repository == "" && !strings.HasPrefix(h.Chart, "oci://"):
		add(f+".repository", "a chart needs a repository")
	case h.Source != "" && h.Repository != "":
		add(f+".repository", "repository is set only with chart")
	}
	if len(h.ReleaseName) > 53 {
		add(f+".releaseName", "at most 53 characters")
	}
	for i, v := range h.ValuesFrom {
		vf := fmt.Sprintf("%s.valuesFrom[%d]", f, i)
		n := 0
		for _, set := range []bool{v.Kind != "", v.Source != "", v.Params} {
			if set {
				n++
			}
		}
		switch {
		case n != 1:
			add(vf, "exactly one of kind, source and params must be set")
		case (v.Kind != "") != (v.Name != ""):
			add(vf, "kind and name are set together")
		case (v.Source != "") != (v.Path != ""):
			add(vf, "source and path are set together")
		case v.Kind != "" && v.Kind != "ConfigMap" && v.Kind != "Secret":
			add(vf+".kind", "must be ConfigMap or Secret")
		}
	}
}
