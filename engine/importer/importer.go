// Package importer turns Flux and Argo CD objects into the equivalent
// ManifestSyncs: Flux's GitRepository, OCIRepository, HelmRepository and
// HelmChart sources with the Kustomizations and HelmReleases that use
// them, and Argo CD's Applications and ApplicationSets (list, cluster and
// git generators). It is pure: it takes decoded objects (from files, or
// listed from a cluster by the caller) and returns ManifestSyncs with a
// report of every field it could not carry over and why, so that moving
// over is one command and nothing is lost silently.
//
// One ManifestSync is written per Kustomization, HelmRelease and
// Application, with the name and namespace of the object it comes from;
// an ApplicationSet becomes one ManifestSync with a target per generated
// Application when those differ only in their destination, else one per
// generated Application (see appset.go).
//
// It must not import client-go or controller-runtime (it is part of the
// engine): the CLI lists the objects of a cluster and hands them in.
package importer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Object is one input object: a decoded Flux or Argo CD resource, or
// anything else (reported and skipped).
type Object struct {
	// File and Line say where it was read; File is empty for an object
	// listed from a cluster.
	File string
	Line int
	// Content is the object as JSON-compatible values.
	Content map[string]any
	// root is the document's node, for the lines of fields.
	root *yaml.Node
}

// Options change what Import writes.
type Options struct {
	// Namespace, when set, is the namespace of every ManifestSync written;
	// by default each keeps its object's (an Application's, a
	// Kustomization's, a HelmRelease's).
	Namespace string
	// Repos are local checkouts of git repositories, by repository URL,
	// that the git generators of ApplicationSets read (and Argo CD
	// Applications, to tell a chart directory from plain YAML). Each is a
	// file system rooted at the checkout: nothing is read outside it.
	Repos map[string]fs.FS
}

// Finding is one field that was not carried over, or carried over with a
// different meaning, and why.
type Finding struct {
	// Object is "Kind namespace/name" of the input object.
	Object string
	// Where is FILE:LINE of the field, when the object came from a file.
	Where string
	// Field is the field's path in the object, such as spec.decryption.
	Field string
	Why   string
}

func (f Finding) String() string {
	var b strings.Builder
	if f.Where != "" {
		b.WriteString(f.Where)
		b.WriteString(": ")
	}
	b.WriteString(f.Object)
	if f.Field != "" {
		b.WriteString(" ")
		b.WriteString(f.Field)
	}
	b.WriteString(": ")
	b.WriteString(f.Why)
	return b.String()
}

// Imported is one ManifestSync written, with the findings of the objects
// it was made of.
type Imported struct {
	// From names the objects it comes from ("Kustomization ns/name").
	From     []string
	Sync     *v1alpha1.ManifestSync
	Findings []Finding
}

// Result is what Import made: the ManifestSyncs, and the findings of
// objects that gave none (skipped kinds, sources nobody used).
type Result struct {
	Syncs    []*Imported
	Findings []Finding
}

// Source kinds and the kinds that become ManifestSyncs, by group.
const (
	fluxSourceGroup    = "source.toolkit.fluxcd.io"
	fluxKustomizeGroup = "kustomize.toolkit.fluxcd.io"
	fluxHelmGroup      = "helm.toolkit.fluxcd.io"
	argoGroup          = "argoproj.io"
)

// Import converts objs. Objects of kinds it does not know are listed in
// the findings and skipped; an object whose reference cannot be resolved
// (a Kustomization whose sourceRef names no source given) is an error
// naming both, and so is a ManifestSync that would not validate.
func Import(objs []Object, opts Options) (*Result, error) {
	in := newInputs(objs)
	res := &Result{}
	var errs []error
	add := func(im *Imported, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		switch {
		case im == nil:
		case im.Sync == nil:
			res.Findings = append(res.Findings, im.Findings...)
		default:
			res.Syncs = append(res.Syncs, im)
		}
	}
	for _, o := range in.all {
		switch o.groupKind() {
		case fluxKustomizeGroup + "/Kustomization":
			add(in.kustomization(o))
		case fluxHelmGroup + "/HelmRelease":
			add(in.helmRelease(o))
		case argoGroup + "/Application":
			add(in.application(o, opts))
		case argoGroup + "/ApplicationSet":
			ims, err := in.applicationSet(o, opts)
			if err != nil {
				errs = append(errs, err)
			}
			for _, im := range ims {
				add(im, nil)
			}
		case fluxSourceGroup + "/GitRepository", fluxSourceGroup + "/OCIRepository",
			fluxSourceGroup + "/HelmRepository", fluxSourceGroup + "/HelmChart", fluxSourceGroup + "/Bucket":
			// Read through the objects that use them.
		case "/Secret":
			if !isArgoCluster(o) {
				res.Findings = append(res.Findings, o.skipped("a Secret is not imported: apply it as it is (its data is not read)"))
			}
		case "/ConfigMap":
			res.Findings = append(res.Findings, o.skipped("a ConfigMap is not imported: apply it as it is (a ManifestSync reads substituteFrom and valuesFrom objects from the cluster)"))
		case argoGroup + "/AppProject":
			res.Findings = append(res.Findings, o.skipped("an AppProject has no ManifestSync: its destinations become manifestsync.dev/allow-from on the destination Namespaces, its resource lists a service account's RBAC (docs/migration.md)"))
		default:
			res.Findings = append(res.Findings, o.skipped("unknown kind, skipped"))
		}
	}
	for _, o := range in.all {
		if o.isSource() && !in.used[o.key()] {
			res.Findings = append(res.Findings, o.skipped("no Kustomization or HelmRelease given uses this source: nothing written for it"))
		}
	}
	if opts.Namespace != "" {
		moveInto(res.Syncs, opts.Namespace)
	}
	for _, im := range res.Syncs {
		tenancy(im)
	}
	byName := map[string]*Imported{}
	for _, im := range res.Syncs {
		key := im.Sync.Namespace + "/" + im.Sync.Name
		if other := byName[key]; other != nil {
			errs = append(errs, fmt.Errorf("%s and %s would both be ManifestSync %s: import them into other namespaces (--to-namespace), one at a time", strings.Join(other.From, ", "), strings.Join(im.From, ", "), key))
		}
		byName[key] = im
	}
	for _, im := range res.Syncs {
		if verrs := engine.Validate(&im.Sync.Spec); len(verrs) > 0 {
			for _, e := range verrs {
				e.File = "ManifestSync " + im.Sync.Namespace + "/" + im.Sync.Name
			}
			errs = append(errs, fmt.Errorf("%s: the ManifestSync written would not validate: %w", strings.Join(im.From, ", "), verrs))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, im := range res.Syncs {
		sortFindings(im.Findings)
	}
	sortFindings(res.Findings)
	slices.SortStableFunc(res.Syncs, func(a, b *Imported) int {
		return cmp.Or(cmp.Compare(a.Sync.Namespace, b.Sync.Namespace), cmp.Compare(a.Sync.Name, b.Sync.Name))
	})
	return res, nil
}

// moveInto puts every ManifestSync into namespace ns, and points the
// dependsOn of each at the new namespace of the ManifestSyncs it names
// that moved with it.
func moveInto(syncs []*Imported, ns string) {
	moved := map[string]bool{}
	for _, im := range syncs {
		moved[im.Sync.Namespace+"/"+im.Sync.Name] = true
	}
	for _, im := range syncs {
		old := im.Sync.Namespace
		for i, d := range im.Sync.Spec.DependsOn {
			dns := cmp.Or(d.Namespace, old)
			switch {
			case moved[dns+"/"+d.Name]:
				im.Sync.Spec.DependsOn[i].Namespace = ""
			case dns != ns:
				im.Sync.Spec.DependsOn[i].Namespace = dns
			}
		}
		im.Sync.Namespace = ns
	}
}

// inputs are the objects given, indexed for references.
type inputs struct {
	all []*object
	// byKey is every object by groupKind/namespace/name.
	byKey map[string]*object
	// used marks the sources some converted object used.
	used map[string]bool
}

func newInputs(objs []Object) *inputs {
	in := &inputs{byKey: map[string]*object{}, used: map[string]bool{}}
	for i := range objs {
		o := newObject(&objs[i])
		in.all = append(in.all, o)
		in.byKey[o.key()] = o
	}
	return in
}

// lookup finds the object of group/kind named name in namespace ns.
func (in *inputs) lookup(group, kind, ns, name string) *object {
	return in.byKey[group+"/"+kind+"/"+ns+"/"+name]
}

// newSync is an empty ManifestSync named after o.
func newSync(name, namespace string) *v1alpha1.ManifestSync {
	ms := &v1alpha1.ManifestSync{}
	ms.APIVersion = v1alpha1.GroupVersion.String()
	ms.Kind = v1alpha1.Kind
	ms.Name = name
	ms.Namespace = namespace
	return ms
}

// duration parses a Flux or Argo CD duration ("10m", "1h30m").
func duration(o *object, field string) *metav1.Duration {
	s := o.str(field)
	if s == "" {
		return nil
	}
	var d metav1.Duration
	if err := d.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil {
		o.report(field, fmt.Sprintf("%q is not a duration: left out", s))
		return nil
	}
	return &d
}

// targetName makes a target name from parts (a namespace, a cluster): the
// pattern targets' names must match, at most 63 characters.
func targetName(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('-')
		}
		b.WriteString(p)
	}
	return dnsLabel(b.String(), "default")
}

// dnsLabel lowercases s and replaces what a source or target name may not
// hold with '-', trimmed to 63 characters; empty gives def.
func dnsLabel(s, def string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 63 {
		out = strings.Trim(out[:63], "-")
	}
	if out == "" {
		return def
	}
	return out
}

// YAML is the ManifestSync as a YAML document, with a comment header
// naming what it was made from and every finding about it.
func (im *Imported) YAML() ([]byte, error) {
	raw, err := json.Marshal(im.Sync)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	dropEmptyRefs(m)
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	body, err := sigsyaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Imported by engine import from %s.\n", strings.Join(im.From, ", "))
	if len(im.Findings) == 0 {
		b.WriteString("# Every field was carried over.\n")
	} else {
		b.WriteString("# Not carried over, or carried over with another meaning:\n")
		for _, f := range im.Findings {
			for i, line := range strings.Split(f.String(), "\n") {
				if i == 0 {
					b.WriteString("# - " + line + "\n")
				} else {
					b.WriteString("#   " + line + "\n")
				}
			}
		}
	}
	b.Write(body)
	return b.Bytes(), nil
}

// sortFindings orders findings by object, then file and line.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		af, al := splitWhere(a.Where)
		bf, bl := splitWhere(b.Where)
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(af, bf), cmp.Compare(al, bl))
	})
}

func splitWhere(w string) (string, int) {
	i := strings.LastIndexByte(w, ':')
	if i < 0 {
		return w, 0
	}
	n, err := strconv.Atoi(w[i+1:])
	if err != nil {
		return w, 0
	}
	return w[:i], n
}

// dropEmptyRefs removes "ref: {}" (the remote's HEAD, the tag latest)
// from the git and oci sources of a ManifestSync as JSON values.
func dropEmptyRefs(m map[string]any) {
	spec, _ := m["spec"].(map[string]any)
	srcs, _ := spec["sources"].([]any)
	for _, s := range srcs {
		sm, _ := s.(map[string]any)
		for _, kind := range []string{"git", "oci"} {
			if g, ok := sm[kind].(map[string]any); ok {
				if r, ok := g["ref"].(map[string]any); ok && len(r) == 0 {
					delete(g, "ref")
				}
			}
		}
	}
}

// tenancy reports a ManifestSync that writes outside its own namespace of
// this cluster without a service account: Flux's and Argo CD's controllers
// write there with their own rights, where the operator's write gate
// refuses it (TargetNotAllowed) until the namespace is trusted or each
// target namespace allows it.
func tenancy(im *Imported) {
	ms := im.Sync
	if ms.Spec.ServiceAccountName != "" || len(im.From) == 0 {
		return
	}
	var outside []string
	for _, t := range ms.Spec.Targets {
		switch {
		case t.Cluster != nil:
		case t.NamespaceSelector != nil:
			outside = append(outside, fmt.Sprintf("the namespaces target %q selects", t.Name))
		case t.Namespace == "":
			outside = append(outside, fmt.Sprintf("the objects' own namespaces (target %q)", t.Name))
		case t.Namespace != ms.Namespace:
			outside = append(outside, "namespace "+t.Namespace)
		}
	}
	if len(outside) == 0 {
		return
	}
	im.Findings = append(im.Findings, Finding{Object: im.From[0], Field: "(tenancy)", Why: fmt.Sprintf(
		"the ManifestSync writes into %s from namespace %s without a service account: the operator refuses that (TargetNotAllowed) until %s is one of engine operator --trusted-namespaces (Helm trustedNamespaces), or each target namespace is annotated manifestsync.dev/allow-from: %s, or spec.serviceAccountName names an account allowed to (docs/migration.md)",
		strings.Join(outside, ", "), ms.Namespace, ms.Namespace, ms.Namespace)})
}
