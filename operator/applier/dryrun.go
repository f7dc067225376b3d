package applier

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// ActionPruned is an object of the ManifestSync that no target wants any
// more: a sync would delete it. Only DryRun reports it.
const ActionPruned Action = "Pruned"

// DiffOptions are the operator's, as DryRun needs them.
type DiffOptions struct {
	// InstanceID is the operator's --instance-id: it decides the owner
	// label and the field manager (OwnerOf, FieldManagerOf).
	InstanceID string
}

// ObjectDiff is what a sync would do to one object, as a server-side dry
// run through the reconciler's own applier (Manager) says.
type ObjectDiff struct {
	// Target is the target's ID.
	Target string
	GVK    schema.GroupVersionKind
	// Namespace and Name name the object.
	Namespace, Name string
	// Action is Created, Configured, Unchanged, Skipped (policy Keep),
	// Conflict, Failed or Pruned. Configured means that the object as the
	// apply would leave it differs from the live one.
	Action Action
	// Live is the object as it is, nil when there is none; Desired is as
	// the apply would leave it, nil when it would not be applied (Skipped,
	// Conflict, Failed, Pruned). Both are normalised for comparison (see
	// NormalizeForDiff). Secret data is in them: mask it before showing.
	Live, Desired *unstructured.Unstructured
	// Err says why the object conflicts or would fail.
	Err error
}

// ID is the identity of the object.
func (d ObjectDiff) ID() v1alpha1.ObjectID {
	return v1alpha1.ObjectID{Namespace: d.Namespace, Name: d.Name, Group: d.GVK.Group, Kind: d.GVK.Kind}
}

// Describe names the object in messages: "Secret web/tls".
func (d ObjectDiff) Describe() string { return d.ID().String() }

// Changes reports whether the object would change: created, configured,
// pruned, or a conflict that the sync would report.
func (d ObjectDiff) Changes() bool {
	switch d.Action {
	case ActionCreated, ActionConfigured, ActionPruned, ActionConflict:
		return true
	}
	return false
}

// DryRun says what syncing ms would do to the cluster of c: every object of
// the targets is applied as the reconciler applies it, under the same
// resource policies, but as a server-side dry run, so that defaults,
// conflicts and admission are the API server's own; objects that the sync
// would prune are listed too. Nothing is written.
//
// targets are the evaluated targets (all of ms's or a subset), each of the
// cluster of c. The objects to prune are those of the live ManifestSync's
// inventory when it exists in the cluster, else those carrying its owner
// label in the targets' namespaces, of the kinds being applied.
//
// opts are the operator's: its instance id decides the owner label and the
// field manager.
//
// An error means the cluster could not be read; an object that would fail
// to apply is reported as Failed.
func DryRun(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync, targets []*engine.TargetResult, opts DiffOptions) ([]ObjectDiff, error) {
	return dryRun(ctx, c, c, nil, ms, targets, opts)
}

// DryRunCluster is DryRun for the targets of one cluster of ms, which c
// reaches, while home reads ms's own cluster: the web UI dry-runs a remote
// target through that cluster's client (RemoteClientAs), the live
// ManifestSync and its inventory staying in home. cluster is the cluster
// as the inventory records it (ClusterRefOf: "" for ms's own): only the
// inventory entries of that cluster are candidates for pruning, so that
// an object is never looked for in a cluster it was not applied to.
// Without a live ManifestSync in home, the candidates are the objects of
// c's cluster carrying its owner label, as DryRun's.
func DryRunCluster(ctx context.Context, c client.Client, home client.Reader, cluster string, ms *v1alpha1.ManifestSync, targets []*engine.TargetResult, opts DiffOptions) ([]ObjectDiff, error) {
	return dryRun(ctx, c, home, &cluster, ms, targets, opts)
}

// ClusterRefOf is the cluster of target t of ms as the inventory records
// it: "" for ms's own cluster, else "<kubeconfig secret>/<key>".
func ClusterRefOf(ms *v1alpha1.ManifestSync, t *engine.TargetResult) string {
	for i := range ms.Spec.Targets {
		if st := &ms.Spec.Targets[i]; st.Name == t.Name && st.Cluster != nil {
			kc := KubeConfigOf(ms, st.Cluster.KubeConfigSecretRef)
			return kc.Name + "/" + kc.Key
		}
	}
	return ""
}

// dryRun is DryRun and DryRunCluster: the ManifestSync is read through
// home; cluster, when not nil, keeps the inventory entries of that cluster
// only.
func dryRun(ctx context.Context, c client.Client, home client.Reader, cluster *string, ms *v1alpha1.ManifestSync, targets []*engine.TargetResult, opts DiffOptions) ([]ObjectDiff, error) {
	a := &Manager{Client: c, Live: c, Managed: c, Owner: OwnerOf(ms, opts.InstanceID), FieldManager: FieldManagerOf(opts.InstanceID), Policy: ms.Spec.Policy.Resources, DryRun: true}
	var (
		out     []ObjectDiff
		desired = map[v1alpha1.ObjectID]bool{}
		broken  = map[string]bool{} // targets that would not sync completely
	)
	targets = slices.Clone(targets)
	for i, t := range targets {
		if t.Err != nil {
			return nil, fmt.Errorf("target %q: %w", t.ID(), t.Err)
		}
		t, err := t.WithManifests() // a dry run keeps them all: it reports them
		if err != nil {
			return nil, err
		}
		targets[i] = t
		created := map[v1alpha1.ObjectID]bool{} // objects this target would create
		for i, obj := range t.Objects {
			if h, skip, _ := engine.HookOf(obj); h != nil || skip {
				continue // a hook runs per sync, never applied as the rest; Argo CD's diff leaves hooks out too
			}
			desired[v1alpha1.IDOf(obj)] = true
			d, err := dryRunObject(ctx, a, t, obj, t.Digests[i], created)
			if err != nil {
				return nil, err
			}
			if d.Action == ActionCreated {
				created[v1alpha1.IDOf(obj)] = true
			}
			if d.Action == ActionFailed || d.Action == ActionConflict {
				broken[t.ID()] = true
			}
			out = append(out, d)
		}
	}
	if ms.Spec.Policy.Prune != nil && !*ms.Spec.Policy.Prune {
		return out, nil
	}
	candidates, err := pruneCandidates(ctx, c, home, cluster, ms, a.Owner, targets)
	if err != nil {
		return nil, err
	}
	for _, it := range candidates {
		if desired[it.id] || broken[it.target] {
			continue // still wanted, or kept until its target syncs
		}
		live, err := getLive(ctx, c, it.gvk(), objectKey(it.id))
		if err != nil {
			return nil, err
		}
		if live == nil || live.GetLabels()[OwnerLabel] != a.Owner || live.GetAnnotations()[PruneAnnotation] == PruneDisabled {
			continue
		}
		desired[it.id] = true // once, even if listed by several targets
		out = append(out, ObjectDiff{
			Target: it.target, GVK: it.gvk(), Namespace: it.id.Namespace, Name: it.id.Name,
			Action: ActionPruned, Live: NormalizeForDiff(live),
		})
	}
	return out, nil
}

// dryRunObject applies one object as a dry run and compares the result
// with the live object. created are the objects of the target that would be
// created before this one: an object in a namespace, or of a kind, that the
// target creates cannot be dry-run (the namespace or CRD does not exist
// yet), and is shown as it is sent.
func dryRunObject(ctx context.Context, a *Manager, t *engine.TargetResult, obj *unstructured.Unstructured, digest string, created map[v1alpha1.ObjectID]bool) (ObjectDiff, error) {
	id := v1alpha1.IDOf(obj)
	d := ObjectDiff{Target: t.ID(), GVK: obj.GroupVersionKind(), Namespace: id.Namespace, Name: id.Name}
	live, err := getLive(ctx, a.Live, obj.GroupVersionKind(), objectKey(id))
	if err != nil {
		return d, err
	}
	d.Live = NormalizeForDiff(live)
	// A sync writes the shard label of the replica that owns the
	// ManifestSync (--shards auto): the dry run keeps the live one's, so
	// that it shows no change of it.
	m := *a
	if live != nil {
		m.Shard = live.GetLabels()[ShardLabel]
	}
	ch := m.Apply(ctx, obj, digest)
	d.Action, d.Err = ch.Action, ch.Err
	switch ch.Action {
	case ActionFailed:
		if live == nil && ch.Applied != nil && createdBefore(ch.Err, obj, t, created) {
			d.Action, d.Err, d.Desired = ActionCreated, nil, NormalizeForDiff(ch.Applied)
		}
	case ActionConflict, ActionSkipped:
	default:
		if ch.Applied == nil { // kept as it is (policy Keep)
			break
		}
		d.Desired = NormalizeForDiff(ch.Applied)
		switch {
		case live == nil:
			d.Action = ActionCreated
		case reflect.DeepEqual(d.Live.Object, d.Desired.Object):
			d.Action = ActionUnchanged
		default:
			d.Action = ActionConfigured
		}
	}
	return d, nil
}

// createdBefore reports whether err is the API server not knowing obj's
// namespace or kind, which the target creates first.
func createdBefore(err error, obj *unstructured.Unstructured, t *engine.TargetResult, created map[v1alpha1.ObjectID]bool) bool {
	switch {
	case apierrors.IsNotFound(err) && obj.GetNamespace() != "":
		return created[v1alpha1.ObjectID{Name: obj.GetNamespace(), Kind: "Namespace"}]
	case apimeta.IsNoMatchError(err):
		gvk := obj.GroupVersionKind()
		for _, o := range t.Objects {
			id := v1alpha1.IDOf(o)
			if id.Kind != "CustomResourceDefinition" || id.Group != "apiextensions.k8s.io" || !created[id] {
				continue
			}
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			if group == gvk.Group && kind == gvk.Kind {
				return true
			}
		}
	}
	return false
}

// replaceDryRun is policy Overwrite as a dry run. Taking over the fields
// of other managers cannot be dry-run together with the apply that
// follows, so the object is replaced (a dry-run update), which leaves it
// as the two would: exactly obj, with the API server's defaults. A change
// refused as immutable would recreate the object as obj.
func (a *Manager) replaceDryRun(ctx context.Context, obj, live *unstructured.Unstructured, ch Change) Change {
	put := obj.DeepCopy()
	put.SetResourceVersion(live.GetResourceVersion())
	ch.Applied = put
	err := a.Client.Update(ctx, put, client.DryRunAll, client.FieldOwner(a.fieldManager()))
	switch {
	case err == nil:
		ch.Action, ch.ResourceVersion = ActionConfigured, put.GetResourceVersion()
	case immutable(err):
		ch.Action, ch.Applied = ActionConfigured, obj // recreated
	default:
		return ch.failed(fmt.Errorf("applying %s: %w", ch.ID.String(), err))
	}
	return ch
}

// getLive reads an object from the API server; nil when it does not exist
// or its kind is not served.
func getLive(ctx context.Context, r client.Reader, gvk schema.GroupVersionKind, key client.ObjectKey) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		id := v1alpha1.ObjectID{Namespace: key.Namespace, Name: key.Name, Group: gvk.Group, Kind: gvk.Kind}
		return nil, fmt.Errorf("reading %s: %w", id, err)
	}
	return obj, nil
}

// pruneCandidates are the objects a sync of targets might prune: the live
// ManifestSync's inventory, read through home (only the evaluated targets'
// entries when targets are a subset; only cluster's when cluster is not
// nil), or, when it is not in home's cluster, the objects of c's cluster
// carrying its owner label in the targets' namespaces, of the kinds the
// targets apply.
func pruneCandidates(ctx context.Context, c client.Client, home client.Reader, cluster *string, ms *v1alpha1.ManifestSync, owner string, targets []*engine.TargetResult) ([]entry, error) {
	live := &v1alpha1.ManifestSync{}
	err := home.Get(ctx, client.ObjectKeyFromObject(ms), live)
	switch {
	case err == nil:
		items, err := inventoryOf(live, ms, targets)
		if err != nil || cluster == nil {
			return items, err
		}
		return slices.DeleteFunc(items, func(it entry) bool { return it.cluster != *cluster }), nil
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
	default:
		return nil, fmt.Errorf("reading ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	var items []entry
	for _, t := range targets {
		for _, gvk := range kindsOf(t) {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			opts := []client.ListOption{client.MatchingLabels{OwnerLabel: owner}}
			if t.Namespace != "" {
				opts = append(opts, client.InNamespace(t.Namespace))
			}
			if err := c.List(ctx, list, opts...); err != nil {
				if apimeta.IsNoMatchError(err) {
					continue
				}
				return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
			}
			for _, o := range list.Items {
				if o.Labels[HookLabel] != "" {
					continue // a hook: in no inventory, never pruned
				}
				id := v1alpha1.ObjectID{Namespace: o.Namespace, Name: o.Name, Group: gvk.Group, Kind: gvk.Kind}
				items = append(items, entry{id: id, version: gvk.Version, target: t.ID()})
			}
		}
	}
	return items, nil
}

// inventoryOf is live's inventory; when targets are not all of ms's, only
// the entries of those targets.
func inventoryOf(live, ms *v1alpha1.ManifestSync, targets []*engine.TargetResult) ([]entry, error) {
	evaluated := map[string]bool{}
	for _, t := range targets {
		evaluated[t.Name] = true
	}
	all := true
	for _, t := range ms.Spec.Targets {
		all = all && evaluated[t.Name]
	}
	items, err := parseInventory(live)
	if err != nil {
		return nil, err
	}
	if all {
		return items, nil
	}
	return slices.DeleteFunc(items, func(it entry) bool {
		name, _, _ := strings.Cut(it.target, "/")
		return !evaluated[name]
	}), nil
}

// NormalizeForDiff is obj without what the API server maintains and our
// digest annotation (managedFields, resourceVersion, uid, generation,
// creationTimestamp, status), so that an object in sync compares equal to
// the result of applying it again. nil stays nil.
func NormalizeForDiff(obj *unstructured.Unstructured) *unstructured.Unstructured {
	if obj == nil {
		return nil
	}
	out := obj.DeepCopy()
	unstructured.RemoveNestedField(out.Object, "status")
	for _, f := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"} {
		unstructured.RemoveNestedField(out.Object, "metadata", f)
	}
	if ann := out.GetAnnotations(); ann != nil {
		delete(ann, DigestAnnotation)
		if len(ann) == 0 {
			unstructured.RemoveNestedField(out.Object, "metadata", "annotations")
		} else {
			out.SetAnnotations(ann)
		}
	}
	return out
}

// entry is an entry of a ManifestSync's inventory, as DryRun reads it.
type entry struct {
	id      v1alpha1.ObjectID
	version string
	target  string
	cluster string // as ClusterRefOf
}

func (it entry) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: it.id.Group, Version: it.version, Kind: it.id.Kind}
}

// parseInventory reads ms's inventory (status.inventory or
// status.inventoryGzip) whole, as the reconciler reads it: entries that do
// not parse are dropped (they cannot name an object to prune); an
// inventory that cannot be read is an error, never an empty inventory.
func parseInventory(ms *v1alpha1.ManifestSync) ([]entry, error) {
	var items []entry
	err := ms.EachInventoryEntry(func(e v1alpha1.InventoryEntry) error {
		id, err := e.Object()
		if err != nil || e.Version == "" {
			return nil
		}
		items = append(items, entry{id: id, version: e.Version, target: e.Target, cluster: e.Cluster})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// kindsOf lists the kinds of t's objects, each once.
func kindsOf(t *engine.TargetResult) []schema.GroupVersionKind {
	seen := map[schema.GroupVersionKind]bool{}
	var out []schema.GroupVersionKind
	for _, o := range t.Objects {
		if gvk := o.GroupVersionKind(); !seen[gvk] {
			seen[gvk] = true
			out = append(out, gvk)
		}
	}
	return out
}
