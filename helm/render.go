//go:build !leanoperator

package helm

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/ignore"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/stdlib"
)

// RenderChart renders c as `helm template RELEASE CHART --namespace NS -f
// VALUES... --include-crds` prints it: the crds/ files first, then the
// templates in Helm's install order (releaseutil.InstallOrder, by kind),
// then the hooks, with their annotations, in Helm's hook order. NOTES.txt
// and partials are not output; neither are empty documents. It returns
// ctx's error when ctx ends first.
func (Renderer) RenderChart(ctx context.Context, c stdlib.HelmChart) ([]stdlib.HelmManifest, error) {
	name := c.Name
	if meta, ok := c.Files["Chart.yaml"]; ok {
		var md chart.Metadata
		if err := yaml.Unmarshal(meta, &md); err == nil && md.Name != "" {
			name = md.Name
		}
	}
	size := 0
	for _, b := range c.Files {
		size += len(b)
	}
	if size > MaxChartBytes {
		return nil, fmt.Errorf("chart %q: %d bytes of files, over the limit of %d", name, size, MaxChartBytes)
	}
	type result struct {
		out []stdlib.HelmManifest
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("rendering failed: %v", p)}
			}
			done <- r
		}()
		r.out, r.err = render(ctx, c)
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("chart %q: %w", name, shorten(r.err))
		}
		return r.out, nil
	case <-ctx.Done():
		running.Add(1)
		go func() {
			<-done
			running.Add(-1)
		}()
		return nil, fmt.Errorf("chart %q: rendering did not end in time: %w", name, ctx.Err())
	}
}

// render is RenderChart's work, on a goroutine of its own.
func render(ctx context.Context, c stdlib.HelmChart) ([]stdlib.HelmManifest, error) {
	files, err := bufferedFiles(c.Files)
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ValidateReleaseName(c.Release); err != nil {
		return nil, fmt.Errorf("release name %q: %w", c.Release, err)
	}
	caps, err := capabilities(c.Capabilities)
	if err != nil {
		return nil, err
	}
	if kv := ch.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("the chart requires kubeVersion %s, which Kubernetes %s is not", kv, caps.KubeVersion.Version)
	}
	if err := checkDependencies(ch); err != nil {
		return nil, err
	}
	vals, err := userValues(c.Values)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, err
	}
	opts := common.ReleaseOptions{Name: c.Release, Namespace: c.Namespace, Revision: 1, IsInstall: true}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, err
	}
	var e engine.Engine // no rest config: lookup returns nothing
	rendered, err := e.RenderWithContext(ctx, ch, top)
	if err != nil {
		return nil, err
	}
	for k := range rendered {
		if strings.HasSuffix(k, "NOTES.txt") {
			delete(rendered, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(rendered, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var out []stdlib.HelmManifest
	var total int64
	add := func(name, content string) error {
		total += int64(len(content))
		if c.MaxBytes > 0 && total > c.MaxBytes {
			return fmt.Errorf("the rendered output is over the limit of %d bytes", c.MaxBytes)
		}
		out = append(out, stdlib.HelmManifest{Name: name, Content: []byte(content)})
		return nil
	}
	if c.IncludeCRDs {
		for _, crd := range ch.CRDObjects() {
			if err := add(crd.Filename, string(crd.File.Data)); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range manifests {
		if err := add(m.Name, m.Content); err != nil {
			return nil, err
		}
	}
	for _, h := range hooks {
		if err := add(h.Path, h.Manifest); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxMessage bounds an error's message: Go's template errors repeat the
// whole chain of includes, 100 KiB for a runaway include.
const maxMessage = 1024

// shorten is err with its message on one line (Helm's trace of a failed
// template spans several: "web/templates/x.yaml:2:13\n  executing ...
// at <.Values.a>:\n    nil pointer ..."), as statuses and events show
// messages, and cut in the middle when longer than maxMessage: the start
// names the template and line, the end says what failed.
func shorten(err error) error {
	msg := oneLine(err.Error())
	if len(msg) > maxMessage {
		msg = msg[:maxMessage/2] + " [...] " + msg[len(msg)-maxMessage/2:]
	}
	if msg == err.Error() {
		return err
	}
	return &shortError{msg: msg, err: err}
}

// oneLine joins the lines of msg, trimmed, with ": " (or a space after a
// line that ends with a colon).
func oneLine(msg string) string {
	if !strings.Contains(msg, "\n") {
		return msg
	}
	var b strings.Builder
	prev := ""
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		switch {
		case prev == "":
		case strings.HasSuffix(prev, ":"):
			b.WriteString(" ")
		default:
			b.WriteString(": ")
		}
		b.WriteString(l)
		prev = l
	}
	return b.String()
}

type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

// capabilities are Helm's for c: the defaults of `helm template` with
// c's kube version and API versions when set.
func capabilities(c stdlib.HelmCapabilities) (*common.Capabilities, error) {
	if c.Unknown != "" {
		return nil, fmt.Errorf("the cluster's capabilities are unknown: %s", c.Unknown)
	}
	caps := common.DefaultCapabilities.Copy()
	v := c.KubeVersion
	if v == "" {
		v = DefaultKubeVersion
	}
	kv, err := common.ParseKubeVersion(v)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", v, err)
	}
	caps.KubeVersion = *kv
	if c.APIVersions != nil {
		caps.APIVersions = common.VersionSet(slices.Clone(c.APIVersions))
	}
	return caps, nil
}

// checkDependencies fails when a dependency of Chart.yaml is not in
// charts/, as `helm template` does: nothing is downloaded here.
func checkDependencies(ch *chart.Chart) error {
	var missing []string
	for _, d := range ch.Metadata.Dependencies {
		if !slices.ContainsFunc(ch.Dependencies(), func(c *chart.Chart) bool { return c.Name() == d.Name }) {
			missing = append(missing, d.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("dependencies %s are not in charts/ (vendor them with helm dependency build)", strings.Join(missing, ", "))
	}
	return nil
}

// userValues merges the values as `helm template -f a -f b` does
// (loader.MergeMaps: maps merged key by key, anything else replaced; a
// later set wins); a set with a TargetPath puts its data as a string at
// that path of what is merged so far, as Flux does. The chart's
// values.yaml is coalesced under the result at render
// (util.ToRenderValues: a null here deletes the chart's key). A helm
// source gives its valuesFrom first and its values last.
func userValues(sets []stdlib.HelmValues) (map[string]any, error) {
	vals := map[string]any{}
	for _, v := range sets {
		if v.TargetPath != "" {
			if err := strvals.ParseIntoString(v.TargetPath+"="+string(v.Data), vals); err != nil {
				if v.Sensitive {
					return nil, fmt.Errorf("%s: targetPath %q: not a valid path", v.Name, v.TargetPath)
				}
				return nil, fmt.Errorf("%s: targetPath %q: %w", v.Name, v.TargetPath, err)
			}
			continue
		}
		m, err := loader.LoadValues(bytes.NewReader(v.Data))
		if err != nil {
			return nil, valuesError(v, err)
		}
		vals = loader.MergeMaps(vals, m)
	}
	return vals, nil
}

var yamlLine = regexp.MustCompile(`yaml: line (\d+): (.*)`)

// valuesError names the values and the line a parse failed at; the
// message of a sensitive one says no more than that.
func valuesError(v stdlib.HelmValues, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	switch {
	case m != nil && v.Sensitive:
		return fmt.Errorf("%s:%s: not valid YAML", v.Name, m[1])
	case m != nil:
		return fmt.Errorf("%s:%s: %s", v.Name, m[1], m[2])
	case v.Sensitive:
		return fmt.Errorf("%s: not a YAML map of values", v.Name)
	}
	return fmt.Errorf("%s: %w", v.Name, err)
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// bufferedFiles are the chart's files as Helm's directory loader reads
// them: sorted, without what .helmignore (and Helm's defaults) ignore, a
// leading byte order mark trimmed.
func bufferedFiles(files map[string][]byte) ([]*archive.BufferedFile, error) {
	rules := ignore.Empty()
	if b, ok := files[ignore.HelmIgnore]; ok {
		r, err := ignore.Parse(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ignore.HelmIgnore, err)
		}
		rules = r
	}
	rules.AddDefaults()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := make([]*archive.BufferedFile, 0, len(paths))
	for _, p := range paths {
		if ignored(rules, p) {
			continue
		}
		out = append(out, &archive.BufferedFile{Name: p, Data: bytes.TrimPrefix(files[p], utf8BOM)})
	}
	return out, nil
}

// ignored reports whether p or one of its directories is ignored.
func ignored(rules *ignore.Rules, p string) bool {
	parts := strings.Split(p, "/")
	for i := 1; i < len(parts); i++ {
		if rules.Ignore(path.Join(parts[:i]...), fileInfo{name: parts[i-1], dir: true}) {
			return true
		}
	}
	return rules.Ignore(p, fileInfo{name: parts[len(parts)-1]})
}

// fileInfo is what ignore.Rules asks of a path: its name and whether it is
// a directory.
type fileInfo struct {
	name string
	dir  bool
}

func (f fileInfo) Name() string { return f.name }
func (f fileInfo) Size() int64  { return 0 }
func (f fileInfo) Mode() fs.FileMode {
	if f.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (f fileInfo) ModTime() time.Time { return time.Time{} }
func (f fileInfo) IsDir() bool        { return f.dir }
func (f fileInfo) Sys() any           { return nil }
