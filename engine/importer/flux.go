package importer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Why Flux fields have no equivalent; the same words for every object.
const (
	whyBucket        = "a Bucket is not a source here (no S3 or cloud storage source): nothing written for it; push its files as an OCI artifact (engine push) and read them with an oci source"
	whyDecryption    = "only the Secret's *.agekey entries (age) decrypt: OpenPGP keys (*.asc) and cloud KMS credentials in it are not used (docs/sops.md)"
	whyKustomizeFile = "no equivalent on a ManifestSync: put it in a kustomization.yaml at the path (built as Flux builds it) or in a transform"
	whyIgnore        = "no equivalent: every YAML file under the path is read (a kustomization.yaml at the path chooses its resources)"
	whySuspend       = "the ManifestSync's suspend is the Kustomization's or HelmRelease's"
	whyOneInterval   = "a ManifestSync has one interval, the Kustomization's or HelmRelease's (the poll of its sources and the re-check); webhooks trigger a sync at once"
)

// kustomization converts a Flux Kustomization: its GitRepository or
// OCIRepository becomes a git or oci source (named after it) at the
// Kustomization's path, built and substituted as Flux builds it, and one
// target.
func (in *inputs) kustomization(o *object) (*Imported, error) {
	ms := newSync(o.name, o.namespace)
	im := &Imported{From: []string{o.String()}, Sync: ms}
	kind := cmp.Or(o.str("spec.sourceRef.kind"), "GitRepository")
	name := o.str("spec.sourceRef.name")
	ns := cmp.Or(o.str("spec.sourceRef.namespace"), o.namespace)
	o.get("spec.sourceRef.apiVersion")
	src := in.lookup(fluxSourceGroup, kind, ns, name)
	if src == nil {
		return nil, o.errorf("spec.sourceRef", "names %s %s/%s, which is not among the objects given: give it too (its file, or --from-cluster)", kind, ns, name)
	}
	in.used[src.key()] = true
	p := cleanPath(o.str("spec.path"))
	var b v1alpha1.Build
	b.Substitute = o.stringMap("spec.postBuild.substitute")
	for i, e := range o.list("spec.postBuild.substituteFrom") {
		var r v1alpha1.SubstituteReference
		if err := convert(e, &r); err != nil {
			return nil, o.errorf(fmt.Sprintf("spec.postBuild.substituteFrom[%d]", i), "%v", err)
		}
		b.SubstituteFrom = append(b.SubstituteFrom, r)
	}
	// The path is built in the whole repository (or artifact), as Flux
	// builds it: a kustomization there may name ../base, and without one
	// each topmost directory below that holds one is built, as Flux's
	// generated kustomization names them.
	var srcFindings []Finding
	switch kind {
	case "GitRepository":
		g, gfind := in.gitRepository(src, o.namespace, o.str("spec.interval"))
		g.Path, g.Build = p, b
		ms.Spec.Sources = []v1alpha1.Source{{Name: dnsLabel(src.name, "repo"), Git: g}}
		srcFindings = gfind
	case "OCIRepository":
		oci, ofind, refused := in.ociRepository(src, o.namespace, o.str("spec.interval"))
		if refused != "" {
			// A verification that cannot be carried over: a ManifestSync
			// without it would apply artifacts Flux refuses.
			o.report("spec.sourceRef", refused)
			im.Sync, im.Findings = nil, append(ofind, o.findings...)
			return im, nil
		}
		oci.Path, oci.Build = p, b
		ms.Spec.Sources = []v1alpha1.Source{{Name: dnsLabel(src.name, "repo"), OCI: oci}}
		srcFindings = ofind
	case "Bucket":
		o.report("spec.sourceRef", whyBucket)
		return in.skip(im, o), nil
	default:
		return nil, o.errorf("spec.sourceRef.kind", "%s is not a Flux source kind", kind)
	}
	in.common(o, ms, "spec.targetNamespace")
	prune := o.boolean("spec.prune", false)
	ms.Spec.Policy.Prune = &prune
	switch p := o.str("spec.deletionPolicy"); p {
	case "", "MirrorPrune":
		if !prune { // Flux's default mirrors prune
			ms.Spec.Policy.Deletion = v1alpha1.DeletionOrphan
		}
	case "WaitForTermination":
		o.report("spec.deletionPolicy", "WaitForTermination is Delete here: the ManifestSync's deletion does not wait for its objects to be gone")
		fallthrough
	case "Delete":
		ms.Spec.Policy.Deletion = v1alpha1.DeletionDelete
	case "Orphan":
		ms.Spec.Policy.Deletion = v1alpha1.DeletionOrphan
	default:
		o.report("spec.deletionPolicy", fmt.Sprintf("%q has no equivalent: policy.deletion is Delete or Orphan", p))
	}
	ms.Spec.Wait = o.boolean("spec.wait", false)
	ms.Spec.Timeout = duration(o, "spec.timeout")
	if ms.Spec.Timeout == nil && ms.Spec.Wait {
		ms.Spec.Timeout = ms.Spec.Interval // Flux: the timeout defaults to the interval
	}
	for i, e := range o.list("spec.patches") {
		var pt v1alpha1.Patch
		if err := convert(e, &pt); err != nil {
			return nil, o.errorf(fmt.Sprintf("spec.patches[%d]", i), "%v", err)
		}
		if strings.Contains(pt.Patch, "${") && (len(b.Substitute) > 0 || len(b.SubstituteFrom) > 0) {
			o.report(fmt.Sprintf("spec.patches[%d]", i), "the patch holds ${...}: Flux substitutes after patching, a target's patches are applied after the substitution: put the patch in a kustomization.yaml at the path")
		}
		ms.Spec.Targets[0].Patches = append(ms.Spec.Targets[0].Patches, pt)
	}
	for i, e := range o.list("spec.healthCheckExprs") {
		var h v1alpha1.HealthCheck
		if err := convert(e, &h); err != nil {
			return nil, o.errorf(fmt.Sprintf("spec.healthCheckExprs[%d]", i), "%v", err)
		}
		ms.Spec.HealthChecks = append(ms.Spec.HealthChecks, h)
	}
	o.drop("spec.healthChecks", "every object the ManifestSync applies is judged (with spec.wait); objects it does not apply cannot be awaited")
	in.decryption(o, ms)
	for _, f := range []string{"spec.images", "spec.namePrefix", "spec.nameSuffix", "spec.commonMetadata", "spec.components", "spec.ignoreMissingComponents", "spec.patchesStrategicMerge", "spec.patchesJson6902"} {
		o.drop(f, whyKustomizeFile)
	}
	o.drop("spec.force", "no equivalent: an object whose immutable fields change is not recreated")
	o.drop("spec.retryInterval", "the operator retries a failed sync with its own backoff")
	o.leftovers("spec")
	im.Findings = append(im.Findings, srcFindings...)
	im.Findings = append(im.Findings, o.findings...)
	return im, nil
}

// decryption carries spec.decryption over: provider sops with its
// secretRef decrypts with the Secret's *.agekey entries, as Flux's; what
// else Flux decrypts with (OpenPGP, cloud KMS, Vault, a service account
// for KMS) is not supported, and said so.
func (in *inputs) decryption(o *object, ms *v1alpha1.ManifestSync) {
	if _, ok := o.get("spec.decryption"); !ok {
		return
	}
	o.read["spec.decryption"] = false
	provider, name := o.str("spec.decryption.provider"), o.str("spec.decryption.secretRef.name")
	switch {
	case provider != "sops":
		o.report("spec.decryption.provider", fmt.Sprintf("%q: only sops is supported: the files are read as they are", provider))
	case name == "":
		o.report("spec.decryption", "no secretRef: the age keys come from a Secret's *.agekey entries here (Flux could use a KMS without one): the files are read as they are")
	default:
		ms.Spec.Decryption = &v1alpha1.Decryption{Provider: "sops", SecretRef: v1alpha1.LocalObjectReference{Name: name}}
		o.report("spec.decryption.secretRef", whyDecryption)
	}
	o.drop("spec.decryption.serviceAccountName", "no equivalent: cloud KMS keys are not supported, only age keys")
	o.leftovers("spec.decryption")
}

// skip turns im into the findings of an object that gives no ManifestSync.
func (in *inputs) skip(im *Imported, o *object) *Imported {
	im.Sync = nil
	im.Findings = o.findings
	return im
}

// common maps what Kustomizations and HelmReleases share: interval,
// suspend, serviceAccountName, dependsOn, kubeConfig, and the one target
// (the namespace of field, empty keeping the objects' own).
func (in *inputs) common(o *object, ms *v1alpha1.ManifestSync, nsField string) {
	ms.Spec.Interval = duration(o, "spec.interval")
	ms.Spec.Suspend = o.boolean("spec.suspend", false)
	ms.Spec.ServiceAccountName = o.str("spec.serviceAccountName")
	for i, e := range o.list("spec.dependsOn") {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if name == "" {
			o.report(fmt.Sprintf("spec.dependsOn[%d]", i), "no name: left out")
			continue
		}
		if _, ok := m["readyExpr"]; ok {
			o.report(fmt.Sprintf("spec.dependsOn[%d].readyExpr", i), "no equivalent: a dependency is ready when its ManifestSync is Ready")
		}
		if ns == o.namespace {
			ns = ""
		}
		ms.Spec.DependsOn = append(ms.Spec.DependsOn, v1alpha1.DependencyReference{Name: name, Namespace: ns})
	}
	t := v1alpha1.Target{Namespace: o.str(nsField)}
	t.Name = targetName(t.Namespace)
	if t.Namespace == "" {
		t.Name = dnsLabel(o.name, "default")
	}
	if sec := o.str("spec.kubeConfig.secretRef.name"); sec != "" {
		t.Cluster = &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: sec, Key: cmp.Or(o.str("spec.kubeConfig.secretRef.key"), "value")}}
	}
	o.drop("spec.kubeConfig.configMapRef", "no equivalent: a remote cluster is a kubeconfig in a Secret (targets[].cluster.kubeConfigSecretRef)")
	ms.Spec.Targets = []v1alpha1.Target{t}
}

// gitRepository is the git source of a Flux GitRepository, for a
// ManifestSync of namespace ns, and the findings of its fields.
func (in *inputs) gitRepository(src *object, ns, interval string) (*v1alpha1.GitSource, []Finding) {
	s := src.fresh()
	g := &v1alpha1.GitSource{URL: s.str("spec.url")}
	g.Ref.Branch = s.str("spec.ref.branch")
	g.Ref.Tag = s.str("spec.ref.tag")
	g.Ref.SemVer = s.str("spec.ref.semver")
	g.Ref.Commit = s.str("spec.ref.commit")
	if name := s.str("spec.ref.name"); name != "" {
		switch {
		case strings.HasPrefix(name, "refs/heads/"):
			g.Ref.Branch = strings.TrimPrefix(name, "refs/heads/")
		case strings.HasPrefix(name, "refs/tags/"):
			g.Ref.Tag = strings.TrimPrefix(name, "refs/tags/")
		default:
			s.report("spec.ref.name", "no equivalent: a git source follows a branch, a tag, a semver range or a commit")
		}
	}
	if sec := s.str("spec.secretRef.name"); sec != "" {
		g.SecretRef = &v1alpha1.LocalObjectReference{Name: sec}
		if src.namespace != ns {
			s.report("spec.secretRef", fmt.Sprintf("the ManifestSync reads Secret %s from its own namespace %s, not %s: copy it there", sec, ns, src.namespace))
		}
	}
	if i := s.str("spec.interval"); i != "" && i != interval {
		s.report("spec.interval", whyOneInterval)
	}
	if s.has("spec.verify") {
		g.Verify = gitVerification(s, g, ns)
	}
	s.drop("spec.timeout", "the operator bounds a fetch itself")
	s.drop("spec.ignore", whyIgnore)
	for _, f := range []string{"spec.include", "spec.recurseSubmodules", "spec.proxySecretRef", "spec.provider", "spec.sparseCheckout"} {
		s.drop(f, "no equivalent")
	}
	s.drop("spec.suspend", whySuspend)
	s.leftovers("spec")
	return g, s.findings
}

// gitVerification is a GitRepository's spec.verify: the same modes (the
// lowercase head of source.toolkit.fluxcd.io/v1beta2 is HEAD, as Flux
// reads it) and the same Secret of public keys. A mode it does not know
// is written as it is, so that validation refuses it rather than the
// source losing its verification.
func gitVerification(s *object, g *v1alpha1.GitSource, ns string) *v1alpha1.GitVerification {
	v := &v1alpha1.GitVerification{Mode: s.str("spec.verify.mode")}
	if v.Mode == "head" {
		v.Mode = "HEAD"
	}
	v.SecretRef.Name = s.str("spec.verify.secretRef.name")
	if v.SecretRef.Name != "" && s.namespace != ns {
		s.report("spec.verify.secretRef", fmt.Sprintf("the ManifestSync reads Secret %s from its own namespace %s, not %s: copy it there", v.SecretRef.Name, ns, s.namespace))
	}
	if (v.Mode == "Tag" || v.Mode == "TagAndHEAD") && g.Ref.Tag == "" && g.Ref.SemVer == "" {
		s.report("spec.verify.mode", fmt.Sprintf("%s verifies the tag read: here the source fails (SourceVerifyFailed) unless its ref is a tag or a semver range", v.Mode))
	}
	s.leftovers("spec.verify")
	return v
}

// ociRepository is the oci source of a Flux OCIRepository, for a
// ManifestSync of namespace ns, and the findings of its fields. The same
// reference (digest, else the highest tag of the semver range its
// semverFilter lets through, else the tag, latest by default), the same
// dockerconfigjson Secret, layer selection and cosign keys. refused, when
// not empty, says why nothing may be written: a verification with no
// equivalent (keyless, notation), without which the ManifestSync would
// apply artifacts Flux refuses.
func (in *inputs) ociRepository(src *object, ns, interval string) (oci *v1alpha1.OCISource, findings []Finding, refused string) {
	s := src.fresh()
	oci = &v1alpha1.OCISource{URL: s.str("spec.url")}
	oci.Ref = v1alpha1.OCIRef{
		Tag:          s.str("spec.ref.tag"),
		SemVer:       s.str("spec.ref.semver"),
		SemVerFilter: s.str("spec.ref.semverFilter"),
		Digest:       s.str("spec.ref.digest"),
	}
	copyHint := func(field, sec string) {
		if sec != "" && s.namespace != ns {
			s.report(field, fmt.Sprintf("the ManifestSync reads Secret %s from its own namespace %s, not %s: copy it there", sec, ns, s.namespace))
		}
	}
	if sec := s.str("spec.secretRef.name"); sec != "" {
		oci.SecretRef = &v1alpha1.LocalObjectReference{Name: sec}
		copyHint("spec.secretRef", sec)
	}
	oci.Insecure = s.boolean("spec.insecure", false)
	if s.has("spec.layerSelector") {
		oci.LayerSelector = &v1alpha1.OCILayerSelector{
			MediaType: s.str("spec.layerSelector.mediaType"),
			Operation: s.str("spec.layerSelector.operation"),
		}
	}
	if s.has("spec.verify") {
		provider := cmp.Or(s.str("spec.verify.provider"), "cosign")
		sec := s.str("spec.verify.secretRef.name")
		switch {
		case provider != "cosign":
			refused = fmt.Sprintf("OCIRepository %s verifies with %s, which has no equivalent (an oci source verifies cosign keys): nothing written for it, as the artifacts would be read unverified", s.name, provider)
			s.report("spec.verify.provider", fmt.Sprintf("%q has no equivalent: an oci source verifies cosign signatures with public keys", provider))
		case sec == "":
			refused = fmt.Sprintf("OCIRepository %s verifies keyless (cosign with OIDC identities), which has no equivalent: nothing written for it, as the artifacts would be read unverified; give it a Secret of cosign public keys (verify.secretRef) and import again", s.name)
			s.drop("spec.verify.matchOIDCIdentity", "no equivalent: keyless verification (Fulcio certificates, Rekor) is not supported, only cosign public keys")
			s.report("spec.verify", "no secretRef: keyless verification is not supported, only cosign public keys (a Secret's *.pub entries)")
		default:
			oci.Verify = &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: sec}}
			copyHint("spec.verify.secretRef", sec)
			s.drop("spec.verify.matchOIDCIdentity", "not used with keys: Flux matches identities only for keyless signatures")
		}
		s.leftovers("spec.verify")
	}
	if i := s.str("spec.interval"); i != "" && i != interval {
		s.report("spec.interval", whyOneInterval)
	}
	switch p := s.str("spec.provider"); p {
	case "", "generic":
	default:
		s.report("spec.provider", fmt.Sprintf("%q has no equivalent: the registry's credentials are secretRef's dockerconfigjson", p))
	}
	s.dropAll("", unmapped{
		{"spec.timeout", "the operator bounds a fetch itself"},
		{"spec.ignore", whyIgnore},
		{"spec.certSecretRef", "no equivalent: the system's CA certificates are trusted"},
		{"spec.proxySecretRef", "no equivalent"},
		{"spec.serviceAccountName", "no equivalent: the registry's credentials are secretRef's (not a service account's imagePullSecrets): name that Secret there"},
		{"spec.suspend", whySuspend},
	})
	s.leftovers("spec")
	return oci, s.findings, refused
}

// cleanPath is a Flux or Argo CD path inside a repository as a source
// path: "./deploy/prod" is "deploy/prod", "./" is the root.
func cleanPath(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

// convert decodes v (JSON-compatible values) into out, refusing unknown
// fields.
func convert(v any, out any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

// rawValues is a Helm values map as a RawExtension (nil when empty).
func rawValues(m map[string]any) *runtime.RawExtension {
	if len(m) == 0 {
		return nil
	}
	raw, _ := json.Marshal(m)
	return &runtime.RawExtension{Raw: raw}
}
