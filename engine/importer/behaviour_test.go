package importer

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// importYAML imports the objects of one YAML text.
func importYAML(t *testing.T, text string, opts Options) (*Result, error) {
	t.Helper()
	objs, err := Decode("in.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return Import(objs, opts)
}

// mustImport imports text and returns its ManifestSyncs by name and every
// finding as one text.
func mustImport(t *testing.T, text string, opts Options) (map[string]*v1alpha1.ManifestSync, string) {
	t.Helper()
	res, err := importYAML(t, text, opts)
	if err != nil {
		t.Fatal(err)
	}
	syncs := map[string]*v1alpha1.ManifestSync{}
	var b strings.Builder
	for _, im := range res.Syncs {
		syncs[im.Sync.Name] = im.Sync
		for _, f := range im.Findings {
			b.WriteString(f.String() + "\n")
		}
	}
	for _, f := range res.Findings {
		b.WriteString(f.String() + "\n")
	}
	return syncs, b.String()
}

func values(t *testing.T, h *v1alpha1.HelmSource) map[string]any {
	t.Helper()
	var m map[string]any
	if h.Values != nil {
		if err := json.Unmarshal(h.Values.Raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

const gitRepo = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: flux-system}
spec:
  url: https://example.com/r.git
  ref: {name: refs/pull/1/head}
`

// A Flux HelmRelease of a chart in a GitRepository (its valuesFiles from
// the same source), with install.crds Skip, no targetNamespace (the
// release's namespace is the HelmRelease's, its name the HelmRelease's),
// and values (helm.values, merged after valuesFrom as Flux merges them;
// no params); an OCIRepository chartRef
// becomes an oci:// chart; ref.name that is not a branch or a tag is
// reported.
func TestHelmReleaseForms(t *testing.T) {
	syncs, findings := mustImport(t, gitRepo+`---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: app, namespace: flux-system}
spec:
  interval: 5m
  chart:
    spec:
      chart: ./charts/app
      sourceRef: {kind: GitRepository, name: repo}
      valuesFiles: [charts/app/values-prod.yaml]
  install: {crds: Skip, disableWait: true}
  values: {replicas: 2}
---
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: podinfo, namespace: flux-system}
spec:
  url: oci://ghcr.io/stefanprodan/charts/podinfo
  ref: {semver: ">=6.0.0"}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo, namespace: flux-system}
spec:
  chartRef: {kind: OCIRepository, name: podinfo}
`, Options{})
	app := syncs["app"]
	if app == nil || len(app.Spec.Sources) != 2 {
		t.Fatalf("app: %+v", app)
	}
	h := app.Spec.Sources[1].Helm
	if h.Source != "repo" || h.Path != "charts/app" || h.ReleaseName != "" || h.IncludeCRDs == nil || *h.IncludeCRDs {
		t.Errorf("app's helm source: %+v", h)
	}
	// Flux's order: the chart's values files, then values, as a helm
	// source merges valuesFrom, then values.
	if len(h.ValuesFrom) != 1 || h.ValuesFrom[0].Source != "repo" || h.ValuesFrom[0].Path != "charts/app/values-prod.yaml" {
		t.Errorf("app's valuesFrom: %+v", h.ValuesFrom)
	}
	if v := values(t, h); v["replicas"] != float64(2) || len(v) != 1 || app.Spec.Params != nil {
		t.Errorf("app's values %v, params %v", v, app.Spec.Params)
	}
	if app.Spec.Wait || app.Spec.Targets[0].Namespace != "flux-system" {
		t.Errorf("app: wait %v, target %+v", app.Spec.Wait, app.Spec.Targets[0])
	}
	p := syncs["podinfo"]
	if p == nil || p.Spec.Sources[0].Helm.Chart != "oci://ghcr.io/stefanprodan/charts/podinfo" || p.Spec.Sources[0].Helm.Version != ">=6.0.0" {
		t.Errorf("podinfo: %+v", p)
	}
	if !strings.Contains(findings, "GitRepository flux-system/repo spec.ref.name: no equivalent") {
		t.Errorf("findings:\n%s", findings)
	}
}

// A Kustomization's deletionPolicy and prune: Flux's default mirrors
// prune (prune false orphans), Orphan and Delete map, WaitForTermination
// is reported; healthCheckExprs become healthChecks; kubeConfig a remote
// target; a patch holding ${var} with substitution is reported.
func TestKustomizationPolicies(t *testing.T) {
	ks := func(name, extra string) string {
		return "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: " + name + ", namespace: flux-system}\nspec:\n  sourceRef: {kind: GitRepository, name: repo}\n" + extra
	}
	syncs, findings := mustImport(t, gitRepo+
		ks("keep", "  prune: false\n")+
		ks("orphan", "  prune: true\n  deletionPolicy: Orphan\n")+
		ks("wait", "  prune: true\n  deletionPolicy: WaitForTermination\n")+
		ks("remote", `  prune: true
  kubeConfig: {secretRef: {name: prod-kubeconfig, key: config}}
  healthCheckExprs:
  - {apiVersion: example.com/v1, kind: Widget, current: "self.status.ready == true"}
  postBuild: {substitute: {tag: v1}}
  patches:
  - patch: '[{"op": "add", "path": "/metadata/labels/tag", "value": "${tag}"}]'
    target: {kind: Deployment}
`), Options{})
	for name, want := range map[string]v1alpha1.DeletionPolicy{"keep": v1alpha1.DeletionOrphan, "orphan": v1alpha1.DeletionOrphan, "wait": v1alpha1.DeletionDelete, "remote": ""} {
		if got := syncs[name].Spec.Policy.Deletion; got != want {
			t.Errorf("%s: deletion %q, want %q", name, got, want)
		}
	}
	r := syncs["remote"]
	if c := r.Spec.Targets[0].Cluster; c == nil || c.KubeConfigSecretRef.Name != "prod-kubeconfig" || c.KubeConfigSecretRef.Key != "config" {
		t.Errorf("remote's target: %+v", r.Spec.Targets[0])
	}
	if len(r.Spec.HealthChecks) != 1 || r.Spec.HealthChecks[0].Current != "self.status.ready == true" {
		t.Errorf("remote's healthChecks: %+v", r.Spec.HealthChecks)
	}
	containsAll(t, findings,
		"Kustomization flux-system/wait spec.deletionPolicy: WaitForTermination is Delete here",
		"Kustomization flux-system/remote spec.patches[0]: the patch holds ${...}",
		"GitRepository flux-system/repo spec.ref.name: no equivalent",
	)
}

const app = `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: web, namespace: argocd}
spec:
  project: default
  source:
    repoURL: https://example.com/r.git
    targetRevision: %REV%
    path: %PATH%
  destination: {name: %DEST%, namespace: web}
`

func appYAML(rev, path, dest string) string {
	return strings.NewReplacer("%REV%", rev, "%PATH%", path, "%DEST%", dest).Replace(app)
}

// An Argo CD targetRevision: HEAD, a commit, a range, a version, a branch.
func TestTargetRevision(t *testing.T) {
	for rev, want := range map[string]v1alpha1.GitRef{
		"HEAD": {},
		"0123456789abcdef0123456789abcdef01234567": {Commit: "0123456789abcdef0123456789abcdef01234567"},
		"'>=1.2 <2'": {SemVer: ">=1.2 <2"},
		"1.x":        {SemVer: "1.x"},
		"v1.2.3":     {Tag: "v1.2.3"},
		"release-1":  {Branch: "release-1"},
	} {
		syncs, _ := mustImport(t, appYAML(rev, "deploy", "in-cluster"), Options{})
		if got := syncs["web"].Spec.Sources[0].Git.Ref; got != want {
			t.Errorf("%s: %+v, want %+v", rev, got, want)
		}
	}
}

// Without automated, an Application's ManifestSync neither prunes nor
// corrects drift, and the report says it now syncs on every change; a
// destination of another cluster is a target through a kubeconfig Secret
// the report names; without a checkout the path's reading is reported;
// with one, a path holding a Chart.yaml is a helm source over the git
// source, and a path whose subdirectories hold YAML without recurse is
// reported.
func TestApplicationForms(t *testing.T) {
	syncs, findings := mustImport(t, appYAML("main", "deploy", "prod-eu"), Options{})
	w := syncs["web"]
	if *w.Spec.Policy.Prune || w.Spec.Policy.Drift != v1alpha1.DriftReport {
		t.Errorf("policy %+v", w.Spec.Policy)
	}
	if c := w.Spec.Targets[0].Cluster; c == nil || c.KubeConfigSecretRef.Name != "cluster-prod-eu" || w.Spec.Targets[0].Name != "prod-eu-web" {
		t.Errorf("target %+v", w.Spec.Targets[0])
	}
	containsAll(t, findings,
		"spec.syncPolicy.automated: not set: Argo CD syncs this Application only on request",
		"spec.destination: cluster prod-eu is remote: create Secret argocd/cluster-prod-eu with key value",
		"spec.source.path: read as YAML files of the whole subtree",
	)

	repo := fstest.MapFS{
		"charts/web/Chart.yaml":     {Data: []byte("apiVersion: v2\nname: web\nversion: 1.0.0\n")},
		"deploy/svc.yaml":           {Data: []byte("kind: Service\n")},
		"deploy/nested/deploy.yaml": {Data: []byte("kind: Deployment\n")},
	}
	opts := Options{Repos: map[string]fs.FS{"https://example.com/r.git": repo}}
	syncs, _ = mustImport(t, appYAML("main", "charts/web", "in-cluster"), opts)
	srcs := syncs["web"].Spec.Sources
	if len(srcs) != 2 || srcs[0].Git == nil || srcs[0].Git.Path != "" || srcs[1].Helm == nil || srcs[1].Helm.Source != "repo" || srcs[1].Helm.Path != "charts/web" || srcs[1].Helm.ReleaseName != "web" {
		t.Errorf("a chart directory: %+v", srcs)
	}
	_, findings = mustImport(t, appYAML("main", "deploy", "in-cluster"), opts)
	if !strings.Contains(findings, "spec.source.directory.recurse: a ManifestSync reads the YAML files of the path's subdirectories too") {
		t.Errorf("findings:\n%s", findings)
	}
}

// Helm parameters are set at their dotted paths, typed as helm --set
// types them unless forceString; a list index is refused.
func TestSetParameter(t *testing.T) {
	v := map[string]any{"a": map[string]any{"keep": "x"}}
	for _, p := range []struct {
		name, value string
		force       bool
	}{{"a.b", "true", false}, {"a.n", "42", false}, {"a.s", "42", true}, {`a.dot\.ted`, "v", false}} {
		if err := setParameter(v, p.name, p.value, p.force); err != nil {
			t.Fatal(err)
		}
	}
	a := v["a"].(map[string]any)
	if a["keep"] != "x" || a["b"] != true || a["n"] != int64(42) || a["s"] != "42" || a["dot.ted"] != "v" {
		t.Errorf("%v", a)
	}
	if err := setParameter(v, "list[0]", "x", false); err == nil {
		t.Error("a list index was accepted")
	}
}

// ApplicationSets: a cluster generator without a selector includes this
// cluster (in-cluster); a post selector filters the list; a git files
// generator reads its files from the checkout, one ManifestSync per file
// when their paths differ; a Go template with missingkey=error fails on
// a missing key, naming the ApplicationSet.
func TestApplicationSets(t *testing.T) {
	set := func(name, gen, tmplName, ns, extra string) string {
		return `---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: ` + name + `, namespace: argocd}
spec:
` + extra + `  generators:
` + gen + `
  template:
    metadata: {name: '` + tmplName + `'}
    spec:
      project: default
      source: {repoURL: 'https://example.com/r.git', path: '{{path}}'}
      destination: {server: '{{server}}', namespace: '` + ns + `'}
      syncPolicy: {automated: {}}
`
	}
	repo := fstest.MapFS{
		"envs/dev/config.json":  {Data: []byte(`{"ns": "dev", "server": "https://kubernetes.default.svc"}`)},
		"envs/prod/config.json": {Data: []byte(`{"ns": "prod", "server": "https://kubernetes.default.svc"}`)},
	}
	opts := Options{Repos: map[string]fs.FS{"https://example.com/r.git": repo}}
	syncs, findings := mustImport(t,
		set("local", "  - clusters: {}", "local-{{name}}", "web", "")+
			set("filtered", `  - list:
      elements:
      - {ns: a, server: 'https://kubernetes.default.svc', tier: front}
      - {ns: b, server: 'https://kubernetes.default.svc', tier: back}
    selector: {matchLabels: {tier: back}}`, "filtered-{{ns}}", "{{ns}}", "")+
			set("files", `  - git:
      repoURL: https://example.com/r.git
      revision: HEAD
      files: [{path: "envs/**/config.json"}]`, "files-{{ns}}", "{{ns}}", ""),
		opts)
	if l := syncs["local-in-cluster"]; l == nil || l.Spec.Targets[0].Cluster != nil {
		t.Errorf("the cluster generator without a selector: %v", syncs)
	}
	if f := syncs["filtered-b"]; f == nil || syncs["filtered-a"] != nil {
		t.Errorf("the post selector: %v", syncs)
	}
	for _, env := range []string{"dev", "prod"} {
		s := syncs["files-"+env]
		if s == nil || s.Spec.Sources[0].Git.Path != "envs/"+env || s.Spec.Targets[0].Namespace != env {
			t.Errorf("files-%s: %+v", env, s)
		}
	}
	if strings.Contains(findings, "needs a checkout") {
		t.Errorf("the checkout was not read:\n%s", findings)
	}

	// Sprig's functions, as Argo CD gives them; not those that read the
	// environment.
	goTmpl := "  goTemplate: true\n"
	goSet := func(name, elems, tmplName string) string {
		r := strings.NewReplacer("{{path}}", "{{.path}}", "{{server}}", "https://kubernetes.default.svc")
		return r.Replace(set(name, "  - list:\n      elements: "+elems, tmplName, "web", goTmpl))
	}
	syncs, _ = mustImport(t, goSet("sprig", "[{ns: staging, path: x}]", `sprig-{{ .ns | trunc 4 | upper | lower }}`), Options{})
	if syncs["sprig-stag"] == nil {
		t.Errorf("a Sprig template: %v", syncs)
	}
	if _, err := importYAML(t, goSet("env", "[{ns: a, path: x}]", `env-{{ env "HOME" }}`), Options{}); err == nil || !strings.Contains(err.Error(), `function "env" not defined`) {
		t.Errorf("env in a template: %v", err)
	}

	_, err := importYAML(t, strings.Replace(goSet("strict", "[{ns: a, path: x}]", "strict-{{.missing}}"), "goTemplate: true\n", "goTemplate: true\n  goTemplateOptions: [\"missingkey=error\"]\n", 1), Options{})
	if err == nil || !strings.Contains(err.Error(), "ApplicationSet argocd/strict spec.template") || !strings.Contains(err.Error(), `map has no entry for key "missing"`) {
		t.Errorf("missingkey=error: %v", err)
	}
}

// Two objects that would give the same ManifestSync are an error naming
// both; --to-namespace moves every ManifestSync and the dependsOn that
// named one that moved.
func TestNamesAndNamespaces(t *testing.T) {
	ks := func(ns, extra string) string {
		return "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: web, namespace: " + ns + "}\nspec:\n  prune: true\n  sourceRef: {kind: GitRepository, name: repo, namespace: flux-system}\n" + extra
	}
	text := gitRepo + ks("flux-system", "") + ks("team", "  dependsOn: [{name: web, namespace: flux-system}, {name: db, namespace: data}]\n")
	if _, err := importYAML(t, text, Options{Namespace: "platform"}); err == nil || !strings.Contains(err.Error(), "Kustomization flux-system/web and Kustomization team/web would both be ManifestSync platform/web") {
		t.Errorf("a name taken twice: %v", err)
	}
	res, err := importYAML(t, gitRepo+ks("flux-system", "")+strings.Replace(ks("team", "  dependsOn: [{name: web, namespace: flux-system}, {name: db, namespace: data}]\n"), "name: web, namespace: team", "name: api, namespace: team", 1), Options{Namespace: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range res.Syncs {
		if im.Sync.Namespace != "platform" {
			t.Errorf("%s: namespace %s", im.Sync.Name, im.Sync.Namespace)
		}
		if im.Sync.Name == "api" {
			want := []v1alpha1.DependencyReference{{Name: "web"}, {Name: "db", Namespace: "data"}}
			if len(im.Sync.Spec.DependsOn) != 2 || im.Sync.Spec.DependsOn[0] != want[0] || im.Sync.Spec.DependsOn[1] != want[1] {
				t.Errorf("dependsOn %+v, want %+v", im.Sync.Spec.DependsOn, want)
			}
		}
	}
}

// A file that is not YAML is an error naming its file and line.
func TestDecodeError(t *testing.T) {
	_, err := Decode("bad.yaml", []byte("kind: A\n---\nkind: [\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "bad.yaml:3: ") {
		t.Errorf("%v", err)
	}
}

// containsAll checks that findings holds every one of want.
func containsAll(t *testing.T, findings string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(findings, w) {
			t.Errorf("findings lack %q:\n%s", w, findings)
		}
	}
}

// A git files generator's file larger than the bound is an error naming
// it, not read.
func TestParamFileBound(t *testing.T) {
	repo := fstest.MapFS{"envs/big/config.json": {Data: make([]byte, maxParamFile+1)}}
	_, err := importYAML(t, `apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: big, namespace: argocd}
spec:
  generators:
  - git: {repoURL: 'https://example.com/r.git', files: [{path: envs/*/config.json}]}
  template:
    metadata: {name: big}
    spec:
      source: {repoURL: 'https://example.com/r.git', path: x}
      destination: {server: 'https://kubernetes.default.svc', namespace: x}
`, Options{Repos: map[string]fs.FS{"https://example.com/r.git": repo}})
	if err == nil || !strings.Contains(err.Error(), "envs/big/config.json: not a regular file of at most 1048576 bytes") {
		t.Errorf("%v", err)
	}
}

// A Kustomization path without a kustomization whose subdirectory has one
// is carried over as it is, without a finding: the engine builds that
// subdirectory, as Flux's generated kustomization names it.
func TestNestedKustomization(t *testing.T) {
	repo := fstest.MapFS{
		"clusters/prod/ns.yaml":                 {Data: []byte("kind: Namespace\n")},
		"clusters/prod/apps/kustomization.yaml": {Data: []byte("resources: [cm.yaml]\n")},
		"clusters/prod/apps/cm.yaml":            {Data: []byte("kind: ConfigMap\n")},
	}
	ks := "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: prod, namespace: flux-system}\nspec:\n  prune: true\n  path: ./clusters/prod\n  sourceRef: {kind: GitRepository, name: repo}\n"
	out, findings := mustImport(t, gitRepo+ks, Options{Repos: map[string]fs.FS{"https://example.com/r.git": repo}})
	if strings.Contains(findings, "spec.path") {
		t.Errorf("the path is reported:\n%s", findings)
	}
	ms := out["prod"]
	if ms == nil || ms.Spec.Sources[0].Git == nil || ms.Spec.Sources[0].Git.Path != "clusters/prod" {
		t.Errorf("the path is not kept on the git source: %+v", ms)
	}
}

// A ManifestSync that would write outside its own namespace without a
// service account is reported with what a default install needs for it
// (the write gate refuses it otherwise); one that writes into its own
// namespace, or names a service account, is not.
func TestTenancyReported(t *testing.T) {
	ks := func(name, target, sa string) string {
		return "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: " + name + ", namespace: team}\nspec:\n  path: ./app\n  targetNamespace: " + target + "\n  serviceAccountName: '" + sa + "'\n  sourceRef: {kind: GitRepository, name: repo, namespace: flux-system}\n"
	}
	_, findings := mustImport(t, gitRepo+ks("own", "team", "")+ks("other", "web", "")+ks("impersonated", "web", "deployer"), Options{})
	containsAll(t, findings, "Kustomization team/other (tenancy): the ManifestSync writes into namespace web from namespace team without a service account",
		"until team is one of engine operator --trusted-namespaces", "manifestsync.dev/allow-from: team")
	for _, quiet := range []string{"team/own (tenancy)", "team/impersonated (tenancy)"} {
		if strings.Contains(findings, quiet) {
			t.Errorf("%s is reported:\n%s", quiet, findings)
		}
	}
}
