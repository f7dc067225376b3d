package source

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// cluster is an ObjectReader over objects by "namespace/name"; gets
// records what was read through it.
type cluster struct {
	name string
	objs map[string]map[string]any
	gets []string
}

func (c *cluster) Get(_ context.Context, o v1alpha1.ObjectSource) (map[string]any, error) {
	key := o.Namespace + "/" + o.Name
	c.gets = append(c.gets, key)
	if obj := c.objs[key]; obj != nil {
		return obj, nil
	}
	return nil, fmt.Errorf("%s %s not found in %s", o.Kind, key, c.name)
}

func (c *cluster) List(_ context.Context, _ string, set *engine.ObjectSet) ([]map[string]any, error) {
	var all []map[string]any
	for _, o := range c.objs {
		all = append(all, o)
	}
	return set.Filter(all, nil), nil
}

type fetcher map[string]*engine.Snapshot

func (f fetcher) FetchGit(_ context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	if snap := f[src.URL]; snap != nil {
		return snap, nil
	}
	return nil, fmt.Errorf("source %q: no repository %s", name, src.URL)
}

func configMap(ns, name, rv string, labels map[string]any) map[string]any {
	md := map[string]any{"namespace": ns, "name": name, "uid": "uid-" + name, "resourceVersion": rv}
	if labels != nil {
		md["labels"] = labels
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}
}

// Each object source is read through the reader Objects gives for it (the
// seam of sources in other clusters), in the spec's namespace unless it
// names one; the revisions are made by the resolver; kustomize sources
// are left to the engine; Observe hears of every provider read.
func TestResolverReadsEachSourceThroughItsReader(t *testing.T) {
	home := &cluster{name: "home", objs: map[string]map[string]any{
		"apps/cfg": configMap("apps", "cfg", "7", nil),
		"apps/a":   configMap("apps", "a", "3", map[string]any{"pick": "yes"}),
		"apps/b":   configMap("apps", "b", "4", nil),
	}}
	other := &cluster{name: "other", objs: map[string]map[string]any{"shared/cfg": configMap("shared", "cfg", "99", nil)}}
	sources := []v1alpha1.Source{
		{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}},
		{Name: "cfg", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg"}},
		{Name: "remote", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shared", Name: "cfg"}},
		{Name: "picked", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap", LabelSelector: labelSelector("pick", "yes")}},
		{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo"}},
	}
	var observed []string
	r := Resolver{
		Namespace: "apps",
		Git:       fetcher{"test://repo": {Revision: "main@sha1:abc"}},
		Objects: func(src *v1alpha1.Source) (ObjectReader, error) {
			if src.Name == "remote" {
				return other, nil
			}
			return home, nil
		},
		Observe: func(src *v1alpha1.Source, kind string, _ time.Duration, err error) {
			observed = append(observed, fmt.Sprintf("%s:%s:%v", src.Name, kind, err))
		},
	}
	snaps, err := r.Resolve(context.Background(), sources)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, snap := range snaps {
		got[name] = snap.Revision
	}
	want := map[string]string{
		"repo":   "main@sha1:abc",
		"cfg":    "resourceVersion:7",
		"remote": "resourceVersion:99",
		"picked": engine.ObjectSetSnapshot([]map[string]any{home.objs["apps/a"]}).Revision,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("revisions %v, want %v", got, want)
	}
	if !slices.Equal(home.gets, []string{"apps/cfg"}) || !slices.Equal(other.gets, []string{"shared/cfg"}) {
		t.Errorf("read from home %v, from other %v", home.gets, other.gets)
	}
	if w := []string{"repo:git:<nil>", "cfg:object:<nil>", "remote:object:<nil>", "picked:objects:<nil>"}; !slices.Equal(observed, w) {
		t.Errorf("observed %v, want %v", observed, w)
	}
}

func labelSelector(k, v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

// A failing source stops the resolution with an *Error that names it and
// gives its index.
func TestResolverErrors(t *testing.T) {
	obj := v1alpha1.Source{Name: "cfg", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "gone"}}
	repo := v1alpha1.Source{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}}
	home := &cluster{name: "home"}
	for _, tc := range []struct {
		r       Resolver
		sources []v1alpha1.Source
		index   int
		msg     string
	}{
		{Resolver{}, []v1alpha1.Source{repo}, 0, `source "repo": git sources are not wired yet`},
		{Resolver{Git: fetcher{}}, []v1alpha1.Source{repo}, 0, `source "repo": no repository test://repo`},
		{Resolver{Namespace: "apps", Objects: func(*v1alpha1.Source) (ObjectReader, error) { return home, nil }}, []v1alpha1.Source{{Name: "app", Kustomize: &v1alpha1.KustomizeSource{}}, obj}, 1, `source "cfg": ConfigMap apps/gone not found in home`},
		{Resolver{Objects: func(*v1alpha1.Source) (ObjectReader, error) { return nil, errors.New("cluster down") }}, []v1alpha1.Source{obj}, 0, `source "cfg": cluster down`},
	} {
		_, err := tc.r.Resolve(context.Background(), tc.sources)
		var se *Error
		if !errors.As(err, &se) || se.Index != tc.index || err.Error() != tc.msg {
			t.Errorf("got %v (%#v), want %q at %d", err, se, tc.msg, tc.index)
		}
	}
	if _, err := (&Resolver{}).Resolve(context.Background(), []v1alpha1.Source{repo}); !errors.Is(err, ErrGitNotWired) {
		t.Errorf("without git: %v", err)
	}
}

// Local reads overrides and copies beside the sync file before any
// provider: a git source read locally says so in its revision; a source
// with neither goes to its provider.
func TestLocalBeforeProviders(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "repo/cm.yaml", "kind: ConfigMap\n")
	write(t, dir, "cfg.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, resourceVersion: \"12\"}\n")
	write(t, dir, "given/x.yaml", "x: 1\n")
	write(t, dir, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: ConfigMap\n")
	sources := []v1alpha1.Source{
		{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}},
		{Name: "cfg", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg"}},
		{Name: "other", Git: &v1alpha1.GitSource{URL: "test://other"}},
		{Name: "given", Git: &v1alpha1.GitSource{URL: "test://given"}},
		{Name: "remote", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "live"}},
	}
	local, err := NewLocal(dir, WorkTree{}, map[string]string{"given": filepath.Join(dir, "given"), "other": "test://git/other@v2"}, sources)
	if err != nil {
		t.Fatal(err)
	}
	home := &cluster{name: "home", objs: map[string]map[string]any{"apps/live": configMap("apps", "live", "5", nil)}}
	r := Resolver{
		Namespace: "apps",
		Git:       fetcher{"test://git/other": {Revision: "v2@sha1:def"}},
		Objects:   func(*v1alpha1.Source) (ObjectReader, error) { return home, nil },
		Local:     local,
	}
	snaps, err := r.Resolve(context.Background(), sources)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"repo":   "local:repo@sha256:",
		"cfg":    "resourceVersion:12",
		"other":  "v2@sha1:def",
		"given":  "local:" + filepath.ToSlash(filepath.Join(dir, "given")) + "@sha256:",
		"remote": "resourceVersion:5",
	} {
		if got := snaps[name].Revision; !strings.HasPrefix(got, want) {
			t.Errorf("%s: revision %q, want %q...", name, got, want)
		}
	}
	if !slices.Equal(home.gets, []string{"apps/live"}) {
		t.Errorf("read from the cluster: %v", home.gets)
	}

	// A copy that cannot be read is the user's error, a LocalError.
	bad := []v1alpha1.Source{{Name: "bad", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}}}
	r.Local, _ = NewLocal(dir, WorkTree{}, nil, bad)
	_, err = r.Resolve(context.Background(), bad)
	var le *LocalError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), `source "bad": `) || !strings.Contains(err.Error(), "holds 2 objects") {
		t.Errorf("bad copy: %v", err)
	}
	// An override URL is for git sources only; its REF must parse.
	if _, err := NewLocal(dir, WorkTree{}, map[string]string{"cfg": "https://x/y.git"}, sources); err == nil || err.Error() != `--source cfg=https://x/y.git: source "cfg" is not a git source` {
		t.Errorf("URL of an object source: %v", err)
	}
	if _, err := NewLocal(dir, WorkTree{}, map[string]string{"repo": "https://x/y.git@tag:"}, sources); err == nil || !strings.Contains(err.Error(), "empty tag") {
		t.Errorf("bad ref: %v", err)
	}
}
