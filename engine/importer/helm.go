package importer

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// maxReleaseName is Helm's limit of a release name.
const maxReleaseName = 53

// helmRelease converts a Flux HelmRelease: its chart (from a
// HelmRepository, a GitRepository, a HelmChart or an OCIRepository)
// becomes a helm source, its values and valuesFrom the source's, in
// Flux's order, and one target in the release's namespace.
func (in *inputs) helmRelease(o *object) (*Imported, error) {
	ms := newSync(o.name, o.namespace)
	im := &Imported{From: []string{o.String()}, Sync: ms}
	h := &v1alpha1.HelmSource{}
	var sources []v1alpha1.Source
	var srcFindings []Finding
	chartSpec := "spec.chart.spec"
	var chart, version, sKind, sName, sNS string
	switch {
	case o.has("spec.chartRef"):
		kind := o.str("spec.chartRef.kind")
		name := o.str("spec.chartRef.name")
		ns := cmp.Or(o.str("spec.chartRef.namespace"), o.namespace)
		o.get("spec.chartRef.apiVersion")
		ref := in.lookup(fluxSourceGroup, kind, ns, name)
		if ref == nil {
			return nil, o.errorf("spec.chartRef", "names %s %s/%s, which is not among the objects given: give it too (its file, or --from-cluster)", kind, ns, name)
		}
		in.used[ref.key()] = true
		switch kind {
		case "OCIRepository":
			r := ref.fresh()
			h.Chart = r.str("spec.url")
			h.Version = cmp.Or(r.str("spec.ref.semver"), r.str("spec.ref.tag"))
			r.drop("spec.ref.digest", "no equivalent: a chart is pinned by its version (the revision records its digest)")
			r.drop("spec.ref.semverFilter", "no equivalent: the version range is the whole filter")
			in.helmAccess(r, h, o.namespace)
			r.drop("spec.layerSelector", "no equivalent: the chart layer of the artifact is read")
			r.leftovers("spec")
			srcFindings = r.findings
			ms.Spec.Sources = []v1alpha1.Source{{Name: dnsLabel(ref.name, "chart"), Helm: h}}
			return in.finishHelmRelease(o, im, h, srcFindings)
		case "HelmChart":
			c := ref.fresh()
			chart, version = c.str("spec.chart"), c.str("spec.version")
			sKind = cmp.Or(c.str("spec.sourceRef.kind"), "HelmRepository")
			sName = c.str("spec.sourceRef.name")
			sNS = c.namespace
			c.get("spec.sourceRef.apiVersion")
			c.dropAll("", unmapped{
				{"spec.interval", whyOneInterval},
				{"spec.reconcileStrategy", "no equivalent: a chart is read again when its version or revision changes"},
				{"spec.valuesFiles", "no equivalent for a chart's own values files: give them as valuesFrom of a source"},
				{"spec.verify", "no equivalent: chart signatures are not verified"},
				{"spec.ignoreMissingValuesFiles", "no equivalent"},
				{"spec.suspend", "no equivalent"},
			})
			c.leftovers("spec")
			srcFindings = c.findings
		default:
			return nil, o.errorf("spec.chartRef.kind", "%s: want OCIRepository or HelmChart", kind)
		}
	case o.has(chartSpec):
		chart, version = o.str(chartSpec+".chart"), o.str(chartSpec+".version")
		sKind = cmp.Or(o.str(chartSpec+".sourceRef.kind"), "HelmRepository")
		sName = o.str(chartSpec + ".sourceRef.name")
		sNS = cmp.Or(o.str(chartSpec+".sourceRef.namespace"), o.namespace)
		o.get(chartSpec + ".sourceRef.apiVersion")
		o.dropAll("", unmapped{
			{chartSpec + ".interval", whyOneInterval},
			{chartSpec + ".reconcileStrategy", "no equivalent: a chart is read again when its version or revision changes"},
			{chartSpec + ".verify", "no equivalent: chart signatures are not verified"},
			{chartSpec + ".ignoreMissingValuesFiles", "no equivalent"},
			{"spec.chart.metadata", "no equivalent: the HelmChart object Flux makes does not exist here"},
		})
	default:
		return nil, o.errorf("spec.chart", "neither spec.chart.spec nor spec.chartRef is set")
	}
	src := in.lookup(fluxSourceGroup, sKind, sNS, sName)
	if src == nil {
		return nil, o.errorf("spec.chart.spec.sourceRef", "names %s %s/%s, which is not among the objects given: give it too (its file, or --from-cluster)", sKind, sNS, sName)
	}
	in.used[src.key()] = true
	if version == "*" {
		version = "" // Flux's default: the newest stable
	}
	switch sKind {
	case "HelmRepository":
		r := src.fresh()
		h.Chart, h.Version = chart, version
		h.Repository = r.str("spec.url")
		if t := r.str("spec.type"); t == "oci" && !strings.HasPrefix(h.Repository, "oci://") {
			h.Repository = "oci://" + strings.TrimPrefix(h.Repository, "https://")
		}
		in.helmAccess(r, h, o.namespace)
		r.drop("spec.passCredentials", "no equivalent: credentials are sent to the repository's host only")
		r.leftovers("spec")
		srcFindings = append(srcFindings, r.findings...)
		ms.Spec.Sources = []v1alpha1.Source{{Name: dnsLabel(src.name, "chart"), Helm: h}}
	case "GitRepository":
		g, gfind := in.gitRepository(src, o.namespace, o.str("spec.interval"))
		repo := dnsLabel(src.name, "repo")
		h.Source, h.Path = repo, cleanPath(chart)
		srcFindings = append(srcFindings, gfind...)
		sources = []v1alpha1.Source{{Name: repo, Git: g}}
		name := "chart"
		if name == repo {
			name = "helm"
		}
		ms.Spec.Sources = append(sources, v1alpha1.Source{Name: name, Helm: h})
		for _, f := range o.list(chartSpec + ".valuesFiles") {
			p, _ := f.(string)
			h.ValuesFrom = append(h.ValuesFrom, v1alpha1.HelmValuesReference{Source: repo, Path: cleanPath(p)})
		}
	case "OCIRepository":
		o.report("spec.chart.spec.sourceRef", "a chart of an OCIRepository is named by spec.chartRef in Flux; here by a helm source with chart oci://")
		return in.skip(im, o), nil
	default:
		o.report("spec.chart.spec.sourceRef", whyBucket)
		return in.skip(im, o), nil
	}
	if sKind != "GitRepository" {
		o.drop(chartSpec+".valuesFiles", "no equivalent for a chart's own values files: give them as valuesFrom of a source")
	}
	return in.finishHelmRelease(o, im, h, srcFindings)
}

// helmAccess maps what HelmRepository and OCIRepository share: the
// credentials, insecure, and what has no equivalent.
func (in *inputs) helmAccess(r *object, h *v1alpha1.HelmSource, ns string) {
	if sec := r.str("spec.secretRef.name"); sec != "" {
		h.SecretRef = &v1alpha1.LocalObjectReference{Name: sec}
		if r.namespace != ns {
			r.report("spec.secretRef", fmt.Sprintf("the ManifestSync reads Secret %s from its own namespace %s, not %s: copy it there", sec, ns, r.namespace))
		}
	}
	h.Insecure = r.boolean("spec.insecure", false)
	r.dropAll("", unmapped{
		{"spec.interval", whyOneInterval},
		{"spec.timeout", "the operator bounds a fetch itself"},
		{"spec.certSecretRef", "no equivalent: the system's CA certificates are trusted"},
		{"spec.provider", "no equivalent: credentials come from secretRef"},
		{"spec.proxySecretRef", "no equivalent"},
		{"spec.verify", "no equivalent: chart signatures are not verified"},
		{"spec.suspend", "the ManifestSync's suspend is the HelmRelease's"},
	})
	r.get("spec.type")
}

// finishHelmRelease maps the HelmRelease's own fields once its chart is
// known.
func (in *inputs) finishHelmRelease(o *object, im *Imported, h *v1alpha1.HelmSource, srcFindings []Finding) (*Imported, error) {
	ms := im.Sync
	in.common(o, ms, "spec.targetNamespace")
	if ms.Spec.Targets[0].Namespace == "" {
		// The release's namespace is the HelmRelease's.
		ms.Spec.Targets[0].Namespace = o.namespace
		ms.Spec.Targets[0].Name = targetName(o.namespace)
	}
	// Flux's release name: [targetNamespace-]name.
	release := cmp.Or(o.str("spec.releaseName"), o.name)
	if tn := o.str("spec.targetNamespace"); tn != "" && o.str("spec.releaseName") == "" {
		release = tn + "-" + o.name
	}
	if len(release) > maxReleaseName {
		o.report("spec.releaseName", fmt.Sprintf("release name %q is longer than %d characters: Flux shortens it with a digest; give a releaseName", release, maxReleaseName))
		release = ""
	}
	if release != ms.Name {
		h.ReleaseName = release
	}
	if ns := o.str("spec.storageNamespace"); ns != "" {
		o.report("spec.storageNamespace", "no release Secrets here: charts are rendered as helm template renders them")
	}
	switch c := o.str("spec.install.crds"); c {
	case "Skip":
		f := false
		h.IncludeCRDs = &f
	case "", "Create", "CreateReplace":
	default:
		o.report("spec.install.crds", fmt.Sprintf("%q: want Skip, Create or CreateReplace", c))
	}
	o.drop("spec.upgrade.crds", "CRDs are applied on every sync, as objects of the first wave (Flux skips them on upgrade by default)")
	// Flux merges the chart's valuesFiles, each valuesFrom in order, then
	// values, as a helm source does.
	for i, e := range o.list("spec.valuesFrom") {
		var r v1alpha1.HelmValuesReference
		if err := convert(e, &r); err != nil {
			return nil, o.errorf(fmt.Sprintf("spec.valuesFrom[%d]", i), "%v", err)
		}
		h.ValuesFrom = append(h.ValuesFrom, r)
	}
	h.Values = rawValues(o.mapAt("spec.values"))
	// Flux waits for the release's objects unless told not to.
	ms.Spec.Wait = !o.boolean("spec.install.disableWait", false)
	o.drop("spec.upgrade.disableWait", "spec.wait follows install.disableWait")
	ms.Spec.Timeout = duration(o, "spec.timeout")
	switch m := o.str("spec.driftDetection.mode"); m {
	case "enabled":
		ms.Spec.Policy.Drift = v1alpha1.DriftCorrect
	case "warn":
		ms.Spec.Policy.Drift = v1alpha1.DriftReport
	case "", "disabled":
		ms.Spec.Policy.Drift = v1alpha1.DriftIgnore
	}
	o.drop("spec.driftDetection.ignore", "drift is judged only on the fields the ManifestSync sets")
	for i := range o.list("spec.postRenderers") {
		for j, e := range o.list(fmt.Sprintf("spec.postRenderers[%d].kustomize.patches", i)) {
			var p v1alpha1.Patch
			if err := convert(e, &p); err != nil {
				return nil, o.errorf(fmt.Sprintf("spec.postRenderers[%d].kustomize.patches[%d]", i, j), "%v", err)
			}
			ms.Spec.Targets[0].Patches = append(ms.Spec.Targets[0].Patches, p)
		}
		o.drop(fmt.Sprintf("spec.postRenderers[%d].kustomize.images", i), "no equivalent: set the image in the values, or in a transform")
	}
	o.drop("spec.install.createNamespace", "no equivalent: render the Namespace (a file of a source, or a transform), or create it first")
	for _, f := range []string{"spec.install.remediation", "spec.upgrade.remediation", "spec.rollback", "spec.uninstall", "spec.test", "spec.maxHistory", "spec.upgrade.force", "spec.upgrade.cleanupOnFail", "spec.upgrade.preserveValues", "spec.install.replace", "spec.install.disableHooks", "spec.upgrade.disableHooks", "spec.install.disableOpenAPIValidation", "spec.upgrade.disableOpenAPIValidation", "spec.install.timeout", "spec.upgrade.timeout", "spec.persistentClient"} {
		o.drop(f, "no equivalent: there are no Helm releases here, the rendered objects are applied, pruned and judged as any others")
	}
	o.drop("spec.commonMetadata", "no equivalent: labels and annotations come from the chart or a transform")
	o.leftovers("spec")
	im.Findings = append(im.Findings, srcFindings...)
	im.Findings = append(im.Findings, o.findings...)
	return im, nil
}
