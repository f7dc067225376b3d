package importer

import (
	"cmp"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// inClusterServer is how Argo CD names the cluster it runs in.
const (
	inClusterServer = "https://kubernetes.default.svc"
	inClusterName   = "in-cluster"
)

// application converts an Argo CD Application: its sources become git, oci or
// helm sources ("repo", "chart", or their own names), its destination the
// one target, its sync policy the ManifestSync's policy.
func (in *inputs) application(o *object, opts Options) (*Imported, error) {
	ms := newSync(o.name, o.namespace)
	im := &Imported{From: []string{o.String()}, Sync: ms}
	var fields []string
	switch {
	case o.has("spec.sources"):
		for i := range o.list("spec.sources") {
			fields = append(fields, fmt.Sprintf("spec.sources[%d]", i))
		}
	case o.has("spec.source"):
		fields = []string{"spec.source"}
	default:
		return nil, o.errorf("spec", "neither spec.source nor spec.sources is set")
	}
	a := &appSources{o: o, opts: opts, refs: map[string]string{}, names: map[string]bool{}, multi: len(fields) > 1}
	// Sources named by ref ($values/...) first, so that valueFiles find them.
	for _, f := range fields {
		if ref := o.str(f + ".ref"); ref != "" {
			a.refs[ref] = a.name(f, ref)
		}
	}
	for _, f := range fields {
		if err := a.source(f); err != nil {
			return nil, err
		}
	}
	ms.Spec.Sources = a.out
	t := in.destination(o, ms.Namespace)
	ms.Spec.Targets = []v1alpha1.Target{t}
	in.syncPolicy(o, ms)
	if p := o.str("spec.project"); p != "" {
		o.report("spec.project", fmt.Sprintf("project %q is not carried over: its destinations become manifestsync.dev/allow-from on each destination Namespace (or a trusted namespace), its resource lists the RBAC of spec.serviceAccountName (docs/migration.md)", p))
	}
	o.dropAll("", unmapped{
		{"spec.ignoreDifferences", "not needed for fields the ManifestSync does not set: drift is judged only on the fields it owns"},
		{"spec.info", "no equivalent"},
		{"spec.revisionHistoryLimit", "status.history keeps the last 10 revisions"},
	})
	if w := o.annotation("argocd.argoproj.io/sync-wave"); w != "" {
		o.report(`metadata.annotations["argocd.argoproj.io/sync-wave"]`, fmt.Sprintf("wave %s orders Applications of an app of apps; between ManifestSyncs the order is spec.dependsOn: add one naming those of the waves before", w))
	}
	ms.Spec.Policy.Deletion = v1alpha1.DeletionOrphan
	for _, f := range o.strings("metadata.finalizers") {
		if strings.HasPrefix(f, "resources-finalizer.argocd.argoproj.io") {
			ms.Spec.Policy.Deletion = v1alpha1.DeletionDelete
		}
	}
	o.leftovers("spec")
	im.Findings = o.findings
	return im, nil
}

// appSources converts the sources of one Application.
type appSources struct {
	o     *object
	opts  Options
	multi bool
	// refs are the source names of the sources with a ref, by ref.
	refs  map[string]string
	names map[string]bool
	out   []v1alpha1.Source
}

// name gives the source of field a unique name: its own name or ref, else
// def ("repo", "chart"), numbered when taken.
func (a *appSources) name(field, def string) string {
	if field != "" {
		if n := a.o.str(field + ".name"); n != "" {
			def = n
		}
	}
	base := dnsLabel(def, "repo")
	n := base
	for i := 2; a.names[n]; i++ {
		n = base + "-" + strconv.Itoa(i)
	}
	a.names[n] = true
	return n
}

func (a *appSources) source(f string) error {
	o := a.o
	repoURL := o.str(f + ".repoURL")
	rev := o.str(f + ".targetRevision")
	p := cleanPath(o.str(f + ".path"))
	var name string
	if ref := o.str(f + ".ref"); ref != "" {
		name = a.refs[ref]
	}
	for _, k := range []string{"plugin", "directory.jsonnet"} {
		o.drop(f+"."+k, "no equivalent: a Starlark or CUE transform is the programmable step")
	}
	if chart := o.str(f + ".chart"); chart != "" {
		h := &v1alpha1.HelmSource{Chart: chart, Version: rev, Repository: helmRepository(repoURL)}
		if name == "" {
			name = a.name(f, "chart")
		}
		a.out = append(a.out, v1alpha1.Source{Name: name, Helm: h})
		return a.helm(f, h, "")
	}
	// An oci:// repoURL without a chart is an OCI artifact of manifests
	// (Argo CD 3.1): an oci source, read as a git source would be.
	src := func(p string) v1alpha1.Source {
		if strings.HasPrefix(repoURL, "oci://") {
			return v1alpha1.Source{Name: name, OCI: &v1alpha1.OCISource{URL: repoURL, Ref: ociRef(rev), Path: p}}
		}
		return v1alpha1.Source{Name: name, Git: &v1alpha1.GitSource{URL: repoURL, Ref: gitRef(rev), Path: p}}
	}
	repo := a.opts.Repos[repoURL]
	isChart := o.has(f + ".helm")
	if !isChart && repo != nil && o.has(f+".path") {
		_, err := fs.Stat(repo, path.Join(cmp.Or(p, "."), "Chart.yaml"))
		isChart = err == nil
	}
	if name == "" {
		name = a.name(f, "repo")
	}
	switch {
	case isChart:
		a.out = append(a.out, src(""))
		h := &v1alpha1.HelmSource{Source: name, Path: p}
		chartName := a.name("", "chart")
		a.out = append(a.out, v1alpha1.Source{Name: chartName, Helm: h})
		return a.helm(f, h, name)
	case !o.has(f+".path") && o.has(f+".ref"):
		// Only read for $ref values files.
		a.out = append(a.out, src(""))
	default:
		a.out = append(a.out, src(p))
		a.directory(f, repo, p)
	}
	for _, k := range []string{"namePrefix", "nameSuffix", "images", "commonLabels", "commonAnnotations", "commonAnnotationsEnvsubst", "forceCommonLabels", "forceCommonAnnotations", "replicas", "patches", "components", "namespace", "version", "kubeVersion", "apiVersions", "labelWithoutSelector", "ignoreMissingComponents"} {
		o.drop(f+".kustomize."+k, whyKustomizeFile)
	}
	return nil
}

// directory reports where reading the path differs from Argo CD's
// directory source: it reads only the files directly in the path unless
// recurse is true.
func (a *appSources) directory(f string, repo fs.FS, p string) {
	o := a.o
	o.drop(f+".directory.include", "no equivalent: every YAML file under the path is read")
	o.drop(f+".directory.exclude", "no equivalent: every YAML file under the path is read")
	if o.boolean(f+".directory.recurse", false) {
		return
	}
	switch {
	case repo == nil:
		if !o.has(f + ".kustomize") {
			o.report(f+".path", "read as YAML files of the whole subtree (or a kustomization.yaml); Argo CD reads only the files directly in it unless directory.recurse, and renders a Chart.yaml there with Helm: give a checkout with --repo URL=DIR to have import check")
		}
	case subdirYAML(repo, cmp.Or(p, ".")):
		o.report(f+".directory.recurse", "a ManifestSync reads the YAML files of the path's subdirectories too; Argo CD reads them only with recurse: true")
	}
}

// subdirYAML tells whether a subdirectory of dir holds a YAML or JSON
// file, looking at no more than 10,000 entries.
func subdirYAML(repo fs.FS, dir string) bool {
	seen, found := 0, false
	_ = fs.WalkDir(repo, dir, func(p string, d fs.DirEntry, err error) error {
		seen++
		if err != nil || seen > 10000 || found {
			return fs.SkipAll
		}
		if !d.IsDir() && path.Dir(p) != path.Clean(dir) && isManifest(p) {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

func isManifest(p string) bool {
	switch path.Ext(p) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// helm maps an Application source's helm fields onto h; repo is the git
// source holding the chart directory ("" for a chart of a repository).
func (a *appSources) helm(f string, h *v1alpha1.HelmSource, repo string) error {
	o := a.o
	hf := f + ".helm"
	for i, v := range o.strings(hf + ".valueFiles") {
		field := fmt.Sprintf("%s.valueFiles[%d]", hf, i)
		if ref, rest, ok := strings.Cut(v, "/"); ok && strings.HasPrefix(ref, "$") {
			src := a.refs[ref[1:]]
			if src == "" {
				return o.errorf(field, "%s names no source with ref %s", v, ref[1:])
			}
			h.ValuesFrom = append(h.ValuesFrom, v1alpha1.HelmValuesReference{Source: src, Path: cleanPath(rest)})
			continue
		}
		if repo == "" {
			o.report(field, "a values file of a chart of a repository has no equivalent: give it as a file of a source ($ref)")
			continue
		}
		h.ValuesFrom = append(h.ValuesFrom, v1alpha1.HelmValuesReference{Source: repo, Path: cleanPath(path.Join(h.Path, v))})
	}
	values := map[string]any{}
	if obj, _ := o.get(hf + ".valuesObject"); obj != nil {
		// Argo CD renders with valuesObject in place of values, not
		// merged with them.
		mergeValues(values, o.mapAt(hf+".valuesObject"))
		o.drop(hf+".values", "Argo CD ignores values when valuesObject is set")
	} else if s := o.str(hf + ".values"); s != "" {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			return o.errorf(hf+".values", "not YAML: %v", lineError(err))
		}
		mergeValues(values, engine.JSONValue(m).(map[string]any))
	}
	for i, e := range o.list(hf + ".parameters") {
		m, _ := e.(map[string]any)
		field := fmt.Sprintf("%s.parameters[%d]", hf, i)
		name, _ := m["name"].(string)
		if err := setParameter(values, name, fmt.Sprint(cmp.Or(m["value"], any(""))), m["forceString"] == true); err != nil {
			o.report(field, err.Error())
		}
	}
	// Argo CD gives the valueFiles in order, then values, then the
	// parameters (--set): a helm source's valuesFrom, then its values,
	// the parameters set into them.
	h.Values = rawValues(values)
	h.ReleaseName = cmp.Or(o.str(hf+".releaseName"), o.name)
	h.Namespace = o.str(hf + ".namespace")
	if o.boolean(hf+".skipCrds", false) {
		f := false
		h.IncludeCRDs = &f
	}
	o.dropAll("", unmapped{
		{hf + ".skipSchemaValidation", "no equivalent: a chart's values.schema.json is always checked"},
		{hf + ".kubeVersion", "the kube version comes from the target cluster (offline, from flags)"},
		{hf + ".apiVersions", "the API versions come from the target cluster (offline, from flags)"},
		{hf + ".fileParameters", "no equivalent: give the file as a values file of a source"},
		{hf + ".passCredentials", "no equivalent: credentials are sent to the repository's host only"},
		{hf + ".ignoreMissingValueFiles", "no equivalent: a missing values file is an error"},
		{hf + ".version", "charts are rendered by Helm v4's engine"},
	})
	return nil
}

// helmRepository is an Argo CD repoURL as a helm source's repository: one
// without a scheme is an OCI registry.
func helmRepository(u string) string {
	if strings.Contains(u, "://") {
		return u
	}
	return "oci://" + u
}

var (
	commitRE  = regexp.MustCompile(`^[0-9a-f]{40}$`)
	versionRE = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+){1,2}([-+].*)?$`)
	rangeRE   = regexp.MustCompile(`[\^~*<>=| ]|\.x`)
)

// gitRef reads an Argo CD targetRevision: HEAD or nothing is the remote's
// HEAD, a full hash a commit, a range a semver, a version a tag, anything
// else a branch.
func gitRef(rev string) v1alpha1.GitRef {
	switch {
	case rev == "" || rev == "HEAD":
		return v1alpha1.GitRef{}
	case commitRE.MatchString(rev):
		return v1alpha1.GitRef{Commit: rev}
	case rangeRE.MatchString(rev):
		return v1alpha1.GitRef{SemVer: rev}
	case versionRE.MatchString(rev):
		return v1alpha1.GitRef{Tag: rev}
	}
	return v1alpha1.GitRef{Branch: rev}
}

// ociRef is the reference of an Argo CD targetRevision of an OCI
// artifact: a sha256 digest, a semver range, or a tag (none, or HEAD, is
// the tag latest).
func ociRef(rev string) v1alpha1.OCIRef {
	switch {
	case rev == "" || rev == "HEAD":
		return v1alpha1.OCIRef{}
	case strings.HasPrefix(rev, "sha256:"):
		return v1alpha1.OCIRef{Digest: rev}
	case rangeRE.MatchString(rev):
		return v1alpha1.OCIRef{SemVer: rev}
	}
	return v1alpha1.OCIRef{Tag: rev}
}

// destination is the target of an Application's destination: this
// cluster, or a remote one through a kubeconfig Secret the user makes.
func (in *inputs) destination(o *object, msNamespace string) v1alpha1.Target {
	server := strings.TrimSuffix(o.str("spec.destination.server"), "/")
	name := o.str("spec.destination.name")
	t := v1alpha1.Target{Namespace: o.str("spec.destination.namespace")}
	if server == inClusterServer || name == inClusterName || (server == "" && name == "") {
		t.Name = targetName(t.Namespace)
		if t.Namespace == "" {
			t.Name = dnsLabel(o.name, "default")
		}
		return t
	}
	cluster := name
	if cluster == "" {
		if u, err := url.Parse(server); err == nil && u.Hostname() != "" {
			cluster = u.Hostname()
		} else {
			cluster = server
		}
	}
	sec := dnsLabel("cluster-"+cluster, "cluster")
	t.Cluster = &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: sec, Key: "value"}}
	t.Name = targetName(cluster, t.Namespace)
	what := cmp.Or(server, name)
	o.report("spec.destination", fmt.Sprintf("cluster %s is remote: create Secret %s/%s with key value holding a kubeconfig of it (Argo CD's cluster Secret is not a kubeconfig)", what, msNamespace, sec))
	return t
}

// syncPolicy maps automated (prune, selfHeal, allowEmpty) and reports
// the sync options that have no equivalent.
func (in *inputs) syncPolicy(o *object, ms *v1alpha1.ManifestSync) {
	sp := "spec.syncPolicy"
	auto := o.has(sp+".automated") && o.boolean(sp+".automated.enabled", true)
	prune := auto && o.boolean(sp+".automated.prune", false)
	ms.Spec.Policy.Prune = &prune
	ms.Spec.Policy.Drift = v1alpha1.DriftReport
	if auto && o.boolean(sp+".automated.selfHeal", false) {
		ms.Spec.Policy.Drift = v1alpha1.DriftCorrect
	}
	ms.Spec.Policy.AllowEmpty = auto && o.boolean(sp+".automated.allowEmpty", false)
	if !auto {
		o.report(sp+".automated", "not set: Argo CD syncs this Application only on request; a ManifestSync syncs every change of its sources (spec.suspend: true holds it); prune is off, drift is reported")
	}
	for i, opt := range o.strings(sp + ".syncOptions") {
		field := fmt.Sprintf("%s.syncOptions[%d]", sp, i)
		k, v, _ := strings.Cut(opt, "=")
		switch {
		case k == "ServerSideApply" && v == "true", k == "Validate" && v == "true":
			// Always so.
		case k == "CreateNamespace" && v == "true":
			o.report(field, "no option: render the Namespace (a file of the source, or a transform), or create it first")
		case k == "PruneLast":
			o.report(field, "no equivalent: pruning follows the waves (manifestsync.dev/wave)")
		case k == "ApplyOutOfSyncOnly":
			o.report(field, "always so: unchanged objects are never written again")
		default:
			o.report(field, "no equivalent")
		}
	}
	o.drop(sp+".retry", "the operator retries a failed sync with its own backoff")
	o.drop(sp+".managedNamespaceMetadata", "no equivalent: render the Namespace with its labels and annotations")
}

// annotation is the value of annotation k of o.
func (o *object) annotation(k string) string {
	v, _ := lookup(o.Content, "metadata.annotations")
	m, _ := v.(map[string]any)
	s, _ := m[k].(string)
	return s
}

// strings is the list of strings at field.
func (o *object) strings(field string) []string {
	var out []string
	for _, e := range o.list(field) {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// mergeValues merges src over dst as Helm merges values files: maps
// deeply, anything else replaced.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// setParameter sets a Helm --set style parameter (a.b.c=value) in values:
// true, false, null and integers are typed unless forceString. Lists
// (a[0]) are not supported.
func setParameter(values map[string]any, name, value string, forceString bool) error {
	if name == "" {
		return fmt.Errorf("no name: left out")
	}
	if strings.ContainsAny(name, "[]") {
		return fmt.Errorf("%s: list indexes in parameter names have no equivalent: give the value in valuesObject", name)
	}
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(name); i++ {
		switch {
		case name[i] == '\\' && i+1 < len(name):
			i++
			cur.WriteByte(name[i])
		case name[i] == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(name[i])
		}
	}
	parts = append(parts, cur.String())
	m := values
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	var v any = value
	if !forceString {
		switch value {
		case "true":
			v = true
		case "false":
			v = false
		case "null":
			v = nil
		default:
			if n, err := strconv.ParseInt(value, 10, 64); err == nil {
				v = n
			}
		}
	}
	m[parts[len(parts)-1]] = v
	return nil
}
