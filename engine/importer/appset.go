package importer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Bounds of what an ApplicationSet may generate offline.
const (
	maxGenerated = 1000
	maxRepoWalk  = 20000
	maxParamFile = 1 << 20
)

// applicationSet expands an ApplicationSet's list, cluster and git
// generators into Applications, as the ApplicationSet controller would,
// and converts them.
//
// When every generated Application gives the same ManifestSync but for its
// target (the usual fan-out of one app over clusters or namespaces), they
// become one ManifestSync named after the ApplicationSet with one target
// per Application: one evaluation, one status, the shape a ManifestSync
// has for this. When they differ otherwise (another path per directory,
// other values), each is its own ManifestSync, named after it: a
// ManifestSync has one set of sources for all its targets.
func (in *inputs) applicationSet(o *object, opts Options) ([]*Imported, error) {
	goTmpl := o.boolean("spec.goTemplate", false)
	options := o.strings("spec.goTemplateOptions")
	tmpl := o.mapAt("spec.template")
	if tmpl == nil {
		return nil, o.errorf("spec.template", "not set")
	}
	var params []map[string]any
	for i := range o.list("spec.generators") {
		ps, err := in.generate(o, opts, fmt.Sprintf("spec.generators[%d]", i), goTmpl)
		if err != nil {
			return nil, err
		}
		params = append(params, ps...)
		if len(params) > maxGenerated {
			return nil, o.errorf("spec.generators", "more than %d Applications", maxGenerated)
		}
	}
	o.dropAll("", unmapped{
		{"spec.syncPolicy", "no equivalent: the ManifestSyncs are written once, not kept in step with the ApplicationSet"},
		{"spec.strategy", "no equivalent: every ManifestSync syncs on its own (spec.dependsOn orders them)"},
		{"spec.templatePatch", "not applied: give the Applications' differences in the template"},
		{"spec.ignoreApplicationDifferences", "no equivalent"},
		{"spec.preservedFields", "no equivalent"},
	})
	o.leftovers("spec")
	var apps []*Imported
	for _, p := range params {
		rendered, err := render(tmpl, p, goTmpl, options)
		if err != nil {
			return nil, o.errorf("spec.template", "%v", err)
		}
		m, _ := rendered.(map[string]any)
		app, err := generatedApp(o, m)
		if err != nil {
			return nil, err
		}
		im, err := in.application(app, opts)
		if err != nil {
			return nil, err
		}
		apps = append(apps, im)
	}
	if len(apps) == 0 {
		o.report("spec.generators", "generated no Application: nothing written")
		return []*Imported{{From: []string{o.String()}, Findings: o.findings}}, nil
	}
	if merged := mergeApps(o, apps); merged != nil {
		return []*Imported{merged}, nil
	}
	for _, im := range apps {
		im.From = append(im.From, o.String())
		im.Findings = append(slices.Clone(o.findings), im.Findings...)
	}
	return apps, nil
}

// generatedApp is the Application an ApplicationSet's template rendered,
// in the ApplicationSet's namespace.
func generatedApp(set *object, m map[string]any) (*object, error) {
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	name, _ := meta["name"].(string)
	if name == "" {
		return nil, set.errorf("spec.template.metadata.name", "the template gives an Application without a name")
	}
	meta["namespace"] = set.namespace
	content := map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta, "spec": m["spec"]}
	app := newObject(&Object{File: set.File, Line: set.Line, Content: content, root: set.root})
	app.label = fmt.Sprintf("ApplicationSet %s/%s (Application %s)", set.namespace, set.name, name)
	app.shown = "spec.template."
	return app, nil
}

// mergeApps makes one ManifestSync of the generated Applications when
// they differ only in their targets; nil otherwise.
func mergeApps(set *object, apps []*Imported) *Imported {
	if len(apps) < 2 {
		return nil
	}
	key := func(ms *v1alpha1.ManifestSync) string {
		s := ms.Spec
		s.Targets = nil
		b, _ := json.Marshal(s)
		return string(b)
	}
	first := key(apps[0].Sync)
	seen := map[string]bool{}
	ms := newSync(set.name, set.namespace)
	ms.Spec = *apps[0].Sync.Spec.DeepCopy()
	ms.Spec.Targets = nil
	im := &Imported{From: []string{set.String()}, Sync: ms, Findings: slices.Clone(set.findings)}
	dup := map[string]bool{}
	for _, a := range apps {
		if key(a.Sync) != first {
			return nil
		}
		t := a.Sync.Spec.Targets[0]
		t.Name = dnsLabel(a.Sync.Name, "app")
		if seen[t.Name] {
			return nil
		}
		seen[t.Name] = true
		ms.Spec.Targets = append(ms.Spec.Targets, t)
		for _, f := range a.Findings {
			k := f.Field + "\x00" + f.Why
			if !dup[k] {
				dup[k] = true
				f.Object = set.String()
				im.Findings = append(im.Findings, f)
			}
		}
	}
	return im
}

// generate runs the generator at field and returns its parameter sets.
func (in *inputs) generate(o *object, opts Options, field string, goTmpl bool) ([]map[string]any, error) {
	var ps []map[string]any
	var err error
	switch {
	case o.has(field + ".list"):
		ps, err = listGenerator(o, field+".list")
	case o.has(field + ".clusters"):
		ps, err = in.clusterGenerator(o, field+".clusters", goTmpl)
	case o.has(field + ".git"):
		ps, err = gitGenerator(o, opts, field+".git", goTmpl)
	default:
		o.report(field, "this generator is not expanded by engine import (list, clusters and git are): its Applications are not written")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o.drop(field+".template", "not applied: a generator's own template has no equivalent here, give it in spec.template")
	if o.has(field + ".selector") {
		var sel metav1.LabelSelector
		if err := convert(o.mapAt(field+".selector"), &sel); err != nil {
			return nil, o.errorf(field+".selector", "%v", err)
		}
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			return nil, o.errorf(field+".selector", "%v", err)
		}
		var kept []map[string]any
		for _, p := range ps {
			if s.Matches(labels.Set(flatStrings(p))) {
				kept = append(kept, p)
			}
		}
		ps = kept
	}
	return ps, nil
}

func listGenerator(o *object, field string) ([]map[string]any, error) {
	var out []map[string]any
	for i, e := range o.list(field + ".elements") {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, o.errorf(fmt.Sprintf("%s.elements[%d]", field, i), "not a mapping")
		}
		out = append(out, m)
	}
	o.drop(field+".elementsYaml", "not expanded: give the elements as a list")
	return out, nil
}

// clusterGenerator gives a parameter set per Argo CD cluster Secret among
// the objects given (their name and server, never their config), and this
// cluster (in-cluster) when there is no selector.
func (in *inputs) clusterGenerator(o *object, field string, goTmpl bool) ([]map[string]any, error) {
	var sel labels.Selector = labels.Everything()
	hasSel := o.has(field + ".selector")
	if hasSel {
		var ls metav1.LabelSelector
		if err := convert(o.mapAt(field+".selector"), &ls); err != nil {
			return nil, o.errorf(field+".selector", "%v", err)
		}
		s, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			return nil, o.errorf(field+".selector", "%v", err)
		}
		sel = s
	}
	values := o.stringMap(field + ".values")
	o.drop(field+".flatList", "not expanded: one Application per cluster")
	var out []map[string]any
	local := false
	for _, s := range in.all {
		if !isArgoCluster(s) {
			continue
		}
		lbls, _ := lookup(s.Content, "metadata.labels")
		lm := toStrings(lbls)
		if !sel.Matches(labels.Set(lm)) {
			continue
		}
		name, server := secretField(s, "name"), secretField(s, "server")
		if server == "" {
			o.report(field, fmt.Sprintf("cluster Secret %s/%s: its server is in its data, which import does not read from a cluster: give the Secret as a file to have its Application written", s.namespace, s.name))
			continue
		}
		if strings.TrimSuffix(server, "/") == inClusterServer {
			local = true
		}
		ann, _ := lookup(s.Content, "metadata.annotations")
		out = append(out, clusterParams(name, server, secretField(s, "project"), lm, toStrings(ann), values, goTmpl))
	}
	if !hasSel && !local {
		out = append([]map[string]any{clusterParams(inClusterName, inClusterServer, "", nil, nil, values, goTmpl)}, out...)
	}
	return out, nil
}

func clusterParams(name, server, project string, lbls, ann, values map[string]string, goTmpl bool) map[string]any {
	norm := normalizeName(name)
	if goTmpl {
		vals := map[string]any{}
		for k, v := range values {
			vals[k] = v
		}
		return map[string]any{"name": name, "nameNormalized": norm, "server": server, "project": project,
			"metadata": map[string]any{"labels": anyMap(lbls), "annotations": anyMap(ann)}, "values": vals}
	}
	p := map[string]any{"name": name, "nameNormalized": norm, "server": server, "project": project}
	for k, v := range lbls {
		p["metadata.labels."+k] = v
	}
	for k, v := range ann {
		p["metadata.annotations."+k] = v
	}
	for k, v := range values {
		p["values."+k] = v
	}
	return p
}

// isArgoCluster tells an Argo CD cluster Secret.
func isArgoCluster(o *object) bool {
	if o.groupKind() != "/Secret" {
		return false
	}
	v, _ := lookup(o.Content, `metadata.labels["argocd.argoproj.io/secret-type"]`)
	return v == "cluster"
}

// secretField is key name, server or project of a cluster Secret, from
// stringData or data. No other key is read.
func secretField(o *object, key string) string {
	if v, ok := lookup(o.Content, "stringData."+key); ok {
		s, _ := v.(string)
		return s
	}
	v, _ := lookup(o.Content, "data."+key)
	s, _ := v.(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return ""
	}
	return string(b)
}

// gitGenerator reads the directories or files of a local checkout of the
// generator's repository (Options.Repos): without one it says so.
func gitGenerator(o *object, opts Options, field string, goTmpl bool) ([]map[string]any, error) {
	repoURL := o.str(field + ".repoURL")
	repo := opts.Repos[repoURL]
	o.get(field + ".revision")
	if repo == nil {
		o.report(field, fmt.Sprintf("needs a checkout of %s: give it with --repo %s=DIR; its Applications are not written", repoURL, repoURL))
		o.get(field + ".directories")
		o.get(field + ".files")
		o.get(field + ".values")
		o.get(field + ".pathParamPrefix")
		return nil, nil
	}
	prefix := o.str(field + ".pathParamPrefix")
	values := o.stringMap(field + ".values")
	var out []map[string]any
	switch {
	case o.has(field + ".directories"):
		var include, exclude []string
		for i := range o.list(field + ".directories") {
			f := fmt.Sprintf("%s.directories[%d]", field, i)
			if o.boolean(f+".exclude", false) {
				exclude = append(exclude, o.str(f+".path"))
			} else {
				include = append(include, o.str(f+".path"))
			}
		}
		dirs, err := walkRepo(repo, true)
		if err != nil {
			return nil, o.errorf(field, "%s: %v", repoURL, err)
		}
		for _, d := range dirs {
			if matchAny(include, d) && !matchAny(exclude, d) {
				out = append(out, pathParams(d, "", prefix, values, goTmpl, nil))
			}
		}
	case o.has(field + ".files"):
		files, err := walkRepo(repo, false)
		if err != nil {
			return nil, o.errorf(field, "%s: %v", repoURL, err)
		}
		for i := range o.list(field + ".files") {
			f := fmt.Sprintf("%s.files[%d]", field, i)
			pattern := o.str(f + ".path")
			if o.boolean(f+".exclude", false) {
				o.report(f, "exclude of files is not applied")
				continue
			}
			for _, file := range files {
				if !globMatch(pattern, file) {
					continue
				}
				elems, err := readParamFile(repo, file)
				if err != nil {
					return nil, o.errorf(f, "%s: %v", file, err)
				}
				for _, e := range elems {
					out = append(out, pathParams(path.Dir(file), path.Base(file), prefix, values, goTmpl, e))
				}
			}
		}
	}
	return out, nil
}

// walkRepo lists the directories (dirs) or the files of a checkout, but
// for .git, bounded.
func walkRepo(repo fs.FS, dirs bool) ([]string, error) {
	var out []string
	n := 0
	err := fs.WalkDir(repo, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxRepoWalk {
			return fmt.Errorf("more than %d entries", maxRepoWalk)
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		if p != "." && d.IsDir() == dirs {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, p); ok {
			return true
		}
	}
	return false
}

// globMatch matches p against pattern, where ** matches any number of
// path segments.
func globMatch(pattern, p string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(p, "/")
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(ps) {
			return j == len(xs)
		}
		if ps[i] == "**" {
			for k := j; k <= len(xs); k++ {
				if match(i+1, k) {
					return true
				}
			}
			return false
		}
		if j == len(xs) {
			return false
		}
		ok, _ := path.Match(ps[i], xs[j])
		return ok && match(i+1, j+1)
	}
	return match(0, 0)
}

// readParamFile reads a git files generator's file: one mapping, or a
// list of them.
func readParamFile(repo fs.FS, file string) ([]map[string]any, error) {
	if info, err := fs.Stat(repo, file); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() || info.Size() > maxParamFile {
		return nil, fmt.Errorf("not a regular file of at most %d bytes", maxParamFile)
	}
	data, err := fs.ReadFile(repo, file)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, lineError(err)
	}
	switch v := engine.JSONValue(v).(type) {
	case map[string]any:
		return []map[string]any{v}, nil
	case []any:
		var out []map[string]any
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("neither a mapping nor a list")
}

// pathParams are the parameters of a directory (file empty) or of a file
// of a git generator, with the file's own (flattened unless goTmpl).
func pathParams(dir, file, prefix string, values map[string]string, goTmpl bool, own map[string]any) map[string]any {
	segments := strings.Split(dir, "/")
	pk := "path"
	if prefix != "" {
		pk = prefix + ".path"
	}
	out := map[string]any{}
	if goTmpl {
		for k, v := range own {
			out[k] = v
		}
		segs := make([]any, len(segments))
		for i, s := range segments {
			segs[i] = s
		}
		pm := map[string]any{"path": dir, "basename": path.Base(dir), "basenameNormalized": normalizeName(path.Base(dir)), "segments": segs}
		if file != "" {
			pm["filename"], pm["filenameNormalized"] = file, normalizeName(file)
		}
		if prefix != "" {
			out[prefix] = map[string]any{"path": pm}
		} else {
			out["path"] = pm
		}
		vals := map[string]any{}
		for k, v := range values {
			vals[k] = v
		}
		out["values"] = vals
		return out
	}
	for k, v := range flatStrings(own) {
		out[k] = v
	}
	out[pk] = dir
	out[pk+".basename"] = path.Base(dir)
	out[pk+".basenameNormalized"] = normalizeName(path.Base(dir))
	if file != "" {
		out[pk+".filename"] = file
		out[pk+".filenameNormalized"] = normalizeName(file)
	}
	for i, s := range segments {
		out[pk+"["+strconv.Itoa(i)+"]"] = s
	}
	for k, v := range values {
		out["values."+k] = v
	}
	return out
}

// normalizeName is Argo CD's nameNormalized: lowercase, and what a name
// may not hold replaced with '-'.
func normalizeName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// flatStrings flattens nested parameters into dotted keys with string
// values, as the non-Go templates and the post selectors see them.
func flatStrings(m map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if prefix != "" {
					k = prefix + "." + k
				}
				walk(k, e)
			}
		case nil:
			out[prefix] = ""
		case string:
			out[prefix] = v
		default:
			b, _ := json.Marshal(v)
			out[prefix] = strings.Trim(string(b), `"`)
		}
	}
	walk("", m)
	return out
}

func toStrings(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := map[string]string{}
	for k, e := range m {
		if s, ok := e.(string); ok {
			out[k] = s
		}
	}
	return out
}

func anyMap(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// render renders every string of the template tree v with params: Go
// templates (goTmpl, with options such as missingkey=error), or Argo CD's
// {{ key }} replacement (an unknown key is left as it is).
func render(v any, params map[string]any, goTmpl bool, options []string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := render(e, params, goTmpl, options)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := render(e, params, goTmpl, options)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case string:
		if !strings.Contains(v, "{{") {
			return v, nil
		}
		if goTmpl {
			return renderGo(v, params, options)
		}
		return renderFlat(v, flatStrings(params)), nil
	}
	return v, nil
}

func renderFlat(s string, params map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.Index(s[i+2:], "}}")
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		key := strings.TrimSpace(s[i+2 : i+2+j])
		b.WriteString(s[:i])
		if v, ok := params[key]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(s[i : i+2+j+2])
		}
		s = s[i+2+j+2:]
	}
}

// templateFuncs are the functions of ApplicationSet Go templates, as Argo
// CD gives them: Sprig's, without those that read the environment or the
// network (env, expandenv, getHostByName), with normalize, toYaml and
// fromYaml.
var templateFuncs = func() template.FuncMap {
	m := sprig.TxtFuncMap()
	for _, k := range []string{"env", "expandenv", "getHostByName"} {
		delete(m, k)
	}
	m["normalize"] = normalizeName
	m["toYaml"] = func(v any) (string, error) {
		b, err := sigsyaml.Marshal(v)
		return strings.TrimSuffix(string(b), "\n"), err
	}
	m["fromYaml"] = func(s string) (map[string]any, error) {
		var out map[string]any
		err := sigsyaml.Unmarshal([]byte(s), &out)
		return out, err
	}
	return m
}()

func renderGo(s string, params map[string]any, options []string) (string, error) {
	t := template.New("").Funcs(templateFuncs)
	for _, o := range options {
		switch o {
		case "missingkey=default", "missingkey=invalid", "missingkey=zero", "missingkey=error":
			t = t.Option(o)
		default:
			return "", fmt.Errorf("goTemplateOptions: %q: want missingkey=default, invalid, zero or error", o)
		}
	}
	t, err := t.Parse(s)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, params); err != nil {
		return "", err
	}
	return b.String(), nil
}
