package inspect

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/internal/objdiff"
	"github.com/manifestsync/manifestsync/operator/view"
)

// The bounds of one Tree call: what a ManifestSync with a huge inventory,
// or a namespace with thousands of Pods, costs a page.
const (
	// MaxObjects is how many inventory objects one call reads; those past
	// it are shown from the status alone, with a note on their target.
	MaxObjects = 1000
	// MaxYAMLBytes is the size of an object's YAML, cut past it with a
	// note.
	MaxYAMLBytes = 256 << 10
	// MaxChildren is how many objects of one kind one namespace lists for
	// children (one page); those past it are left out with a note.
	MaxChildren = 500
	// MaxTreeYAMLBytes is the YAML of one call; the objects past it show
	// without, with a note.
	MaxTreeYAMLBytes = 16 << 20
)

// childKinds are the kinds of objects the cluster makes for a workload,
// found by the controller owner reference: a Deployment's ReplicaSets, a
// ReplicaSet's, StatefulSet's, DaemonSet's or Job's Pods, a CronJob's Jobs.
var childKinds = map[schema.GroupKind]schema.GroupVersionKind{
	{Group: "apps", Kind: "Deployment"}:  {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	{Group: "apps", Kind: "ReplicaSet"}:  {Version: "v1", Kind: "Pod"},
	{Group: "apps", Kind: "StatefulSet"}: {Version: "v1", Kind: "Pod"},
	{Group: "apps", Kind: "DaemonSet"}:   {Version: "v1", Kind: "Pod"},
	{Group: "batch", Kind: "Job"}:        {Version: "v1", Kind: "Pod"},
	{Group: "batch", Kind: "CronJob"}:    {Group: "batch", Version: "v1", Kind: "Job"},
}

// Tree is every target of ms (from its status, as view.Describe reads it)
// with its objects grouped by wave, each read live through c and judged
// as `engine status` judges it (kstatus, or the rule of
// spec.healthChecks), and under each workload the objects the cluster
// made for it. Objects of a remote cluster are not read (their
// kubeconfig is the operator's): they show their state alone. A read the
// API server refuses leaves its message in the node. The YAML shown masks
// the values of Secrets, in the Secrets and wherever another object of
// the tree holds one. An inventory that cannot be read is an error.
func Tree(ctx context.Context, c client.Reader, ms *v1alpha1.ManifestSync) ([]Target, error) {
	d, err := view.Describe(ms, 0)
	if err != nil {
		return nil, fmt.Errorf("ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	checker, _ := health.New(ms.Spec.HealthChecks) // an invalid rule was refused by the webhook; the rest still judge
	r := &treeReader{c: c, checker: checker, lists: map[listKey]*childList{}, live: map[nodeKey]*unstructured.Unstructured{}, red: redact.New()}
	out := make([]Target, 0, len(d.Targets))
	// Each target's nodes and their waves, in inventory order; the
	// objects are read concurrently, readers at a time.
	var (
		jobs  []func()
		read  int
		nodes = make([][]Node, len(d.Targets))
		waves = make([][]int, len(d.Targets))
	)
	for i, vt := range d.Targets {
		t := Target{Target: vt}
		remote := vt.Cluster != "" && vt.Cluster != "in-cluster"
		nodes[i], waves[i] = make([]Node, len(t.Objects)), make([]int, len(t.Objects))
		skipped := 0
		for j := range t.Objects {
			o := &t.Objects[j]
			n := &nodes[i][j]
			*n = Node{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Managed: true, State: o.State}
			switch {
			case remote:
			case read >= MaxObjects:
				skipped++
			default:
				read++
				wave := &waves[i][j]
				jobs = append(jobs, func() {
					*wave = r.readManaged(ctx, n)
					o.Health, o.HealthMessage = n.Health, n.HealthMessage
				})
			}
		}
		if skipped > 0 {
			t.Note = fmt.Sprintf("%d objects not read: one page reads at most %d", skipped, MaxObjects)
		}
		out = append(out, t)
	}
	runAll(jobs, readers)
	for i := range out {
		byWave := map[int][]Node{}
		for j, n := range nodes[i] {
			byWave[waves[i][j]] = append(byWave[waves[i][j]], n)
		}
		for _, w := range slices.Sorted(maps.Keys(byWave)) {
			out[i].Waves = append(out[i].Waves, Wave{Wave: w, Nodes: byWave[w]})
		}
	}
	// The YAML once every Secret is read, so that a value one holds is
	// masked in every other object.
	for i := range out {
		for j := range out[i].Waves {
			for k := range out[i].Waves[j].Nodes {
				r.showYAML(&out[i].Waves[j].Nodes[k])
			}
		}
	}
	return out, nil
}

// readers is how many reads one Tree call makes at a time.
const readers = 8

// runAll runs jobs, n at a time, and returns when all have.
func runAll(jobs []func(), n int) {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, job := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			job()
		})
	}
	wg.Wait()
}

// treeReader reads the objects of one Tree call, concurrently; each
// namespace's objects of one child kind are listed once.
type treeReader struct {
	c       client.Reader
	checker *health.Checker
	red     *redact.Redactor // knows the values of the Secrets read
	mu      sync.Mutex       // guards lists and live
	lists   map[listKey]*childList
	// live are the objects read, by node.
	live map[nodeKey]*unstructured.Unstructured
	// yamlBytes is the YAML shown so far (showYAML runs after the reads,
	// alone).
	yamlBytes int
}

// nodeKey names a node's object.
type nodeKey struct{ group, kind, namespace, name string }

func keyOf(n *Node) nodeKey { return nodeKey{n.Group, n.Kind, n.Namespace, n.Name} }

type listKey struct {
	namespace string
	gvk       schema.GroupVersionKind
}

// childList is one namespace's objects of one kind, by the UID of their
// controller; err is why they could not be listed, truncated whether
// there were more than MaxChildren.
type childList struct {
	once      sync.Once
	byOwner   map[types.UID][]*unstructured.Unstructured
	err       error
	truncated bool
}

// readManaged reads the live object of n, an inventory object, and sets
// its health and children; it returns the object's wave (0 when it
// cannot be read).
func (r *treeReader) readManaged(ctx context.Context, n *Node) int {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(schema.GroupVersionKind{Group: n.Group, Version: n.Version, Kind: n.Kind})
	err := r.c.Get(ctx, client.ObjectKey{Namespace: n.Namespace, Name: n.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		res := r.checker.Check(nil)
		n.Health, n.HealthMessage = string(res.Status), res.Message
		return 0
	case err != nil:
		n.Health, n.Error = string(health.Unknown), err.Error()
		return 0
	}
	r.red.AddObject(obj.Object)
	r.fill(ctx, n, obj, 0)
	wave, err := engine.WaveOf(obj)
	if err != nil {
		return 0
	}
	return wave
}

// fill sets the health and children of n from its live object, and keeps
// the object for its YAML; depth bounds the descent (a Deployment's Pods
// are two levels down).
func (r *treeReader) fill(ctx context.Context, n *Node, obj *unstructured.Unstructured, depth int) {
	r.mu.Lock()
	r.live[keyOf(n)] = obj
	r.mu.Unlock()
	res := r.checker.Check(obj)
	n.Health, n.HealthMessage = string(res.Status), res.Message
	gvk, ok := childKinds[obj.GroupVersionKind().GroupKind()]
	if !ok || depth >= 3 || obj.GetNamespace() == "" {
		return
	}
	l := r.list(ctx, obj.GetNamespace(), gvk)
	switch {
	case l.err != nil:
		n.Note = fmt.Sprintf("%ss not shown: %v", gvk.Kind, l.err)
	case l.truncated:
		n.Note = fmt.Sprintf("only the first %d %ss of namespace %s were listed", MaxChildren, gvk.Kind, obj.GetNamespace())
	}
	for _, child := range l.byOwner[obj.GetUID()] {
		cg := child.GroupVersionKind()
		cn := Node{Group: cg.Group, Version: cg.Version, Kind: cg.Kind, Namespace: child.GetNamespace(), Name: child.GetName()}
		r.fill(ctx, &cn, child, depth+1)
		n.Children = append(n.Children, cn)
	}
}

// showYAML sets the YAML of n and its children from the objects read,
// within MaxTreeYAMLBytes for the whole call.
func (r *treeReader) showYAML(n *Node) {
	if obj := r.live[keyOf(n)]; obj != nil {
		var note string
		if r.yamlBytes >= MaxTreeYAMLBytes {
			note = fmt.Sprintf("YAML left out: this page shows %d MiB of YAML at most", MaxTreeYAMLBytes>>20)
		} else {
			n.YAML, note = liveYAML(obj, r.red)
			r.yamlBytes += len(n.YAML)
		}
		n.Note = strings.Join(slices.DeleteFunc([]string{n.Note, note}, func(s string) bool { return s == "" }), "; ")
	}
	for i := range n.Children {
		r.showYAML(&n.Children[i])
	}
}

// list is namespace's objects of gvk, listed once per call, one page of
// MaxChildren at most.
func (r *treeReader) list(ctx context.Context, namespace string, gvk schema.GroupVersionKind) *childList {
	key := listKey{namespace, gvk}
	r.mu.Lock()
	l, ok := r.lists[key]
	if !ok {
		l = &childList{}
		r.lists[key] = l
	}
	r.mu.Unlock()
	l.once.Do(func() { l.read(ctx, r.c, namespace, gvk) })
	return l
}

// read lists namespace's objects of gvk into l.
func (l *childList) read(ctx context.Context, c client.Reader, namespace string, gvk schema.GroupVersionKind) {
	l.byOwner = map[types.UID][]*unstructured.Unstructured{}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, list, client.InNamespace(namespace), client.Limit(MaxChildren)); err != nil {
		l.err = err
		return
	}
	l.truncated = list.GetContinue() != "" || len(list.Items) > MaxChildren
	for i := range list.Items[:min(len(list.Items), MaxChildren)] {
		item := &list.Items[i]
		item.SetGroupVersionKind(gvk) // list items may come without it
		for _, ref := range item.GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller {
				l.byOwner[ref.UID] = append(l.byOwner[ref.UID], item)
			}
		}
	}
	for _, children := range l.byOwner {
		slices.SortFunc(children, func(a, b *unstructured.Unstructured) int { return cmp.Compare(a.GetName(), b.GetName()) })
	}
}

// LiveYAML is obj as the UI shows it: YAML without managedFields, a
// Secret's values masked as `engine diff` masks an unchanged value (***),
// cut at MaxYAMLBytes. note says what was cut; empty when nothing was.
func LiveYAML(obj *unstructured.Unstructured) (yaml, note string) {
	return liveYAML(obj, nil)
}

// liveYAML is LiveYAML with every value red knows masked too.
func liveYAML(obj *unstructured.Unstructured, red *redact.Redactor) (string, string) {
	obj = obj.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	text, err := objdiff.YAML(objdiff.Show(obj, red))
	if err != nil {
		return "", fmt.Sprintf("not shown: %v", err)
	}
	return cut(text)
}

// cut cuts text at MaxYAMLBytes, at a line's end, saying so in a last
// comment line and in note.
func cut(text string) (string, string) {
	if len(text) <= MaxYAMLBytes {
		return text, ""
	}
	note := fmt.Sprintf("YAML cut at %d KiB of %d KiB", MaxYAMLBytes>>10, (len(text)+1023)>>10)
	head := text[:MaxYAMLBytes]
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	return head + "# ... " + note + "\n", note
}
