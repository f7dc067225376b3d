package soak

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// The fleet: 50 ManifestSyncs of four kinds, spread over five home
// namespaces, writing into shared target namespaces of this cluster and of
// the remote one.
const (
	objectSyncs    = 15 // a Secret source and a Starlark transform; a third also to the remote cluster
	configMapSyncs = 10 // a ConfigMap source passed through; half also to the remote cluster
	gitSyncs       = 15 // a git source; half with a transform from the repository
	selectorSyncs  = 10 // a Secret source copied to the namespaces a selector picks

	homes       = 5
	targetNSs   = 4
	selectables = 6
	remoteNSs   = 2

	groupLabel   = "soak.manifestsync.dev/group"
	foreignLabel = "soak.manifestsync.dev/foreign"
	// foreignNS holds, in both clusters, unowned objects with the names
	// of managed ones; its group is one no selector picks.
	foreignNS    = "soak-foreign"
	foreignGroup = "z"
	// gitInterval is the git syncs' spec.interval: git is polled.
	gitInterval = 5 * time.Second
	// handManager is the field manager of the hand edits.
	handManager = "soak-hand-edit"
)

func homeNS(i int) string   { return fmt.Sprintf("soak-h-%d", i%homes) }
func targetNS(i int) string { return fmt.Sprintf("soak-t-%d", i%targetNSs) }
func selectNS(i int) string { return fmt.Sprintf("soak-s-%d", i) }
func remoteNS(i int) string { return fmt.Sprintf("soak-r-%d", i%remoteNSs) }

type syncKind int

const (
	kindObject syncKind = iota
	kindConfigMap
	kindGit
	kindSelector
)

func (k syncKind) String() string {
	return [...]string{"object", "configmap", "git", "selector"}[k]
}

const (
	local  = ""
	remote = "remote"
)

// objKey names one object: its cluster (local or remote), kind, namespace
// and name.
type objKey struct {
	Cluster, Kind, Namespace, Name string
}

func (k objKey) String() string {
	s := fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name)
	if k.Cluster != local {
		s += " in the remote cluster"
	}
	return s
}

// inventoryID is the key's id in status.inventory.
func (k objKey) inventoryID() string { return k.Namespace + "_" + k.Name + "__" + k.Kind }

// target is one fixed target of a ManifestSync.
type target struct{ name, cluster, namespace string }

// msync is one ManifestSync and the state of its sources as the test last
// wrote them.
type msync struct {
	kind      syncKind
	ns, name  string
	id        string
	targets   []target
	group     string // of a selector sync: the label value it selects
	transform bool   // a git sync with a transform.star

	mu sync.Mutex // held while a source is rewritten

	// Guarded by the fleet's mutex.
	data    map[string]string // the source Secret's or ConfigMap's data
	files   map[string]string // a git sync's ConfigMaps: name -> value
	poison  string            // an object sync's bad port while poisoned
	changes int               // source changes made, for the write budget
	moves   int               // moves to another replica (shards_test.go), for the write budget
}

func (s *msync) owner() string { return s.ns + "." + s.name }
func (s *msync) String() string {
	return fmt.Sprintf("ManifestSync %s/%s (%s)", s.ns, s.name, s.kind)
}

// sourceName is the name of an object sync's source object.
func (s *msync) sourceName() string { return "src-" + s.name }

// fleet is the model: what every ManifestSync must produce, given its
// sources and the namespaces' labels as the test last wrote them.
type fleet struct {
	mu       sync.Mutex
	syncs    []*msync
	byOwner  map[string]*msync
	nsGroups map[string]string // selectable namespace -> group label ("" none)
	// secrets are the Secret values that exist or existed in the
	// clusters: no log, event or status may hold one.
	secrets map[string]bool
	// desiredSince holds every object desired now, with the time since
	// when; ever every object desired at some time.
	desiredSince map[objKey]time.Time
	ever         map[objKey]*msync
	// The test's own writes to managed objects.
	edits   map[objKey]int
	deletes map[objKey]int
	deleted map[objKey]time.Time // the last hand deletion
}

func newFleet(rng *rand.Rand) *fleet {
	f := &fleet{
		byOwner: map[string]*msync{}, nsGroups: map[string]string{}, secrets: map[string]bool{},
		desiredSince: map[objKey]time.Time{}, ever: map[objKey]*msync{},
		edits: map[objKey]int{}, deletes: map[objKey]int{}, deleted: map[objKey]time.Time{},
	}
	for i, g := range []string{"a", "a", "b", "b", "", ""} {
		f.nsGroups[selectNS(i)] = g
	}
	n := 0
	add := func(kind syncKind, j int) *msync {
		s := &msync{kind: kind, ns: homeNS(n), id: fmt.Sprintf("%02d", j)}
		s.name = fmt.Sprintf("%s-%s", []string{"obj", "cm", "git", "sel"}[kind], s.id)
		n++
		f.syncs = append(f.syncs, s)
		f.byOwner[s.owner()] = s
		return s
	}
	for j := range objectSyncs {
		s := add(kindObject, j)
		s.targets = []target{{"t0", local, targetNS(j)}, {"t1", local, targetNS(j + 1)}}
		if j%3 == 0 {
			s.targets = append(s.targets, target{"remote", remote, remoteNS(j)})
		}
		s.data = map[string]string{"token": f.newSecret(rng), "port": strconv.Itoa(8000 + j)}
	}
	for j := range configMapSyncs {
		s := add(kindConfigMap, j)
		s.targets = []target{{"t0", local, targetNS(j)}}
		if j%2 == 1 {
			s.targets = append(s.targets, target{"remote", remote, remoteNS(j)})
		}
		s.data = map[string]string{"value": "v0", "rev": "0"}
	}
	for j := range gitSyncs {
		s := add(kindGit, j)
		s.targets = []target{{"t0", local, targetNS(j)}}
		s.transform = j%2 == 0
		s.files = map[string]string{s.name + "-0": "v0"}
		if j%3 == 1 {
			s.files[s.name+"-1"] = "v0"
		}
	}
	for j := range selectorSyncs {
		s := add(kindSelector, j)
		s.group = []string{"a", "b"}[j%2]
		s.data = map[string]string{"token": f.newSecret(rng)}
	}
	f.refresh()
	return f
}

// newSecret makes a Secret value and remembers it.
func (f *fleet) newSecret(rng *rand.Rand) string {
	v := randomString(rng, 24)
	f.secrets[v] = true
	return v
}

func randomString(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
}

// desired is what s must produce now: each object's data (Secrets
// decoded). The caller holds f.mu.
func (f *fleet) desired(s *msync) map[objKey]map[string]string {
	out := map[objKey]map[string]string{}
	switch s.kind {
	case kindObject:
		port, _ := strconv.Atoi(s.data["port"])
		for _, t := range s.targets {
			out[objKey{t.cluster, "Secret", t.namespace, "copy-" + s.name}] = map[string]string{"token": s.data["token"]}
			out[objKey{t.cluster, "ConfigMap", t.namespace, "cfg-" + s.name}] = map[string]string{"port": strconv.Itoa(port + 1), "target": t.name}
		}
	case kindConfigMap:
		for _, t := range s.targets {
			out[objKey{t.cluster, "ConfigMap", t.namespace, s.sourceName()}] = maps.Clone(s.data)
		}
	case kindGit:
		for _, t := range s.targets {
			for name, v := range s.files {
				data := map[string]string{"value": v}
				if s.transform {
					data["via"] = "starlark"
				}
				out[objKey{t.cluster, "ConfigMap", t.namespace, name}] = data
			}
		}
	case kindSelector:
		for ns, g := range f.nsGroups {
			if g == s.group {
				data := maps.Clone(s.data)
				data["patched"] = "strategic-merge" // selectorPatch
				out[objKey{local, "Secret", ns, s.sourceName()}] = data
			}
		}
	}
	return out
}

// refresh recomputes the desired objects after a change of the model.
// The caller holds f.mu (or is the constructor).
func (f *fleet) refresh() {
	now := time.Now()
	cur := map[objKey]bool{}
	for _, s := range f.syncs {
		for k := range f.desired(s) {
			cur[k] = true
			f.ever[k] = s
			if _, ok := f.desiredSince[k]; !ok {
				f.desiredSince[k] = now
			}
		}
	}
	for k := range f.desiredSince {
		if !cur[k] {
			delete(f.desiredSince, k)
		}
	}
}

// change applies a change to the model under its lock and refreshes it.
func (f *fleet) change(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	f.refresh()
}

// localObjects are the managed objects of this cluster desired now,
// sorted, for hand edits to pick from.
func (f *fleet) localObjects() []objKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []objKey
	for k := range f.desiredSince {
		if k.Cluster == local {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b objKey) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// needles are the strings no log, event or status may hold: every Secret
// value, raw and in base64.
func (f *fleet) needles() []needle {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]needle, 0, 2*len(f.secrets))
	for v := range f.secrets {
		out = append(out, needle{v, v, "raw"}, needle{base64.StdEncoding.EncodeToString([]byte(v)), v, "base64"})
	}
	return out
}

type needle struct{ text, secret, form string }

// masked names a Secret value without printing it.
func masked(v string) string {
	if len(v) <= 4 {
		return "****"
	}
	return v[:4] + "…"
}

// manifestSync is the ManifestSync of s.
func (s *msync) manifestSync(gitURL string) *v1alpha1.ManifestSync {
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}}
	spec := &ms.Spec
	objectSource := func(kind string) []v1alpha1.Source {
		return []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: kind, Name: s.sourceName()}}}
	}
	for _, t := range s.targets {
		vt := v1alpha1.Target{Name: t.name, Namespace: t.namespace}
		if t.cluster == remote {
			vt.Cluster = &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "remote", Key: "value"}}
		}
		spec.Targets = append(spec.Targets, vt)
	}
	switch s.kind {
	case kindObject:
		spec.Sources = objectSource("Secret")
		spec.Transform = &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: objectTransform}}
		spec.Params = &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"name": %q}`, s.name)}
	case kindConfigMap:
		spec.Sources = objectSource("ConfigMap")
		// Checked against the builtin schemas: in the full engine in the
		// operator's process, in the image's lean engine (which the soak
		// runs) in its engine-worker, as CUE is not linked into it.
		spec.Schemas = []v1alpha1.SchemaRef{{Builtin: "k8s"}}
	case kindGit:
		spec.Sources = []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: gitURL, Ref: v1alpha1.GitRef{Branch: "main"}, Path: "apps/" + s.name}}}
		if s.transform {
			spec.Transform = &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Source: "repo", Path: "transform.star"}}
		}
		spec.Interval = &metav1.Duration{Duration: gitInterval}
		// Pushes may bring the fetch forward (the webhook flood fault).
		ms.Annotations = map[string]string{webhook.SecretAnnotation: hookSecret}
	case kindSelector:
		spec.Sources = objectSource("Secret")
		spec.Targets = []v1alpha1.Target{{
			Name:              "selected",
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: s.group}},
			Patches:           []v1alpha1.Patch{{Patch: fmt.Sprintf(selectorPatch, s.sourceName())}},
		}}
	}
	return ms
}

// selectorPatch is the strategic-merge patch of the selector syncs' copies:
// the lean engine, which links no kustomize, applies it in its
// engine-worker (the full engine in its own process).
const selectorPatch = `{apiVersion: v1, kind: Secret, metadata: {name: %s}, data: {patched: c3RyYXRlZ2ljLW1lcmdl}}`

// objectTransform copies the source Secret's token into a Secret and puts
// its port, plus one, in a ConfigMap. A port that is not a number fails
// the evaluation with an error that quotes it: the way in of issue 12's
// first leak.
const objectTransform = `
def main(ctx):
    d = ctx.sources["src"].object["data"]
    port = int(base64.decode(d["port"]))
    name = ctx.params["name"]
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "copy-" + name}, "data": {"token": d["token"]}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg-" + name},
         "data": {"port": str(port + 1), "target": ctx.target.name}},
    ]
`

// gitTransform is the transform.star of the git syncs that have one.
const gitTransform = `
def main(ctx):
    out = []
    for o in ctx.inputs:
        data = dict(o["data"])
        data["via"] = "starlark"
        out.append({"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": {"name": o["metadata"]["name"]}, "data": data})
    return out
`

// gitFiles are the files of the repository the git syncs read. The
// caller holds f.mu (or is setting up).
func (f *fleet) gitFiles() map[string]string {
	out := map[string]string{}
	for _, s := range f.syncs {
		if s.kind != kindGit {
			continue
		}
		for name, v := range s.files {
			out["apps/"+s.name+"/"+name+".yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, v)
		}
		if s.transform {
			out["apps/"+s.name+"/transform.star"] = gitTransform
		}
	}
	return out
}

// sourceObject is the source object of an object, configmap or selector
// sync as the model holds it. The caller holds f.mu.
func (f *fleet) sourceObject(s *msync) client.Object {
	meta := metav1.ObjectMeta{Namespace: s.ns, Name: s.sourceName()}
	if s.kind == kindConfigMap {
		return &corev1.ConfigMap{ObjectMeta: meta, Data: maps.Clone(s.data)}
	}
	data := map[string][]byte{}
	for k, v := range s.data {
		data[k] = []byte(v)
	}
	if s.poison != "" {
		data["port"] = []byte(s.poison)
	}
	return &corev1.Secret{ObjectMeta: meta, Data: data}
}

// writeSource makes the cluster's source object of s what the model
// says, creating it if need be.
func (f *fleet) writeSource(ctx context.Context, c client.Client, s *msync) error {
	f.mu.Lock()
	want := f.sourceObject(s)
	f.mu.Unlock()
	cur := want.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), cur); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		return c.Create(ctx, want)
	}
	want.SetResourceVersion(cur.GetResourceVersion())
	return c.Update(ctx, want)
}

// owned reports whether obj carries the owner label of one of the fleet's
// ManifestSyncs, and which.
func (f *fleet) owned(obj metav1.Object) *msync {
	return f.byOwner[obj.GetLabels()[controller.OwnerLabel]]
}
