package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Sources fetches the snapshots of the sources the reconciler does not read
// from the cluster itself: Git repositories. The git provider implements it.
// secrets reads the Secrets a source names (its secretRef, in the
// ManifestSync's namespace): as the ManifestSync's service account when it
// has one, so that a tenant cannot borrow credentials its account may not
// read.
type Sources interface {
	Fetch(ctx context.Context, ms *v1alpha1.ManifestSync, src *v1alpha1.Source, secrets client.Reader) (*engine.Snapshot, error)
}

// errGitNotWired is the error of a git source when no Sources is configured.
var errGitNotWired = errors.New("git sources are not wired yet")

// fetchSources returns the snapshot of every git, object and object set
// source.
// Kustomize sources are built by the engine from the snapshots they name.
func (r *Reconciler) fetchSources(ctx context.Context, ms *v1alpha1.ManifestSync, st *syncState) (map[string]*engine.Snapshot, error) {
	forgetGoneSources(ms, st)
	snaps := map[string]*engine.Snapshot{}
	for i := range ms.Spec.Sources {
		src := &ms.Spec.Sources[i]
		var (
			snap *engine.Snapshot
			err  error
			typ  string
		)
		start := time.Now()
		sc, err := r.sourceClusterOf(ctx, ms, src) // this cluster, or the remote one src.Cluster names
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, err)
		}
		switch {
		case src.Object != nil:
			typ = "object"
			snap, err = r.objectSource(ctx, ms, sc, src.Object, st)
		case src.Objects != nil:
			typ = "objects"
			snap, err = r.objectSetSource(ctx, ms, sc, src.Name, src.Objects, st)
		case src.Git != nil:
			typ = "git"
			snap, err = r.fetchGit(ctx, ms, src)
		default:
			continue
		}
		sourceDuration.WithLabelValues(ms.Namespace, ms.Name, src.Name, typ).Observe(time.Since(start).Seconds())
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, sc.fail(err))
		}
		snaps[src.Name] = snap
	}
	return snaps, nil
}

// forgetGoneSources drops the metric series of the sources read before
// that are no longer in the spec.
func forgetGoneSources(ms *v1alpha1.ManifestSync, st *syncState) {
	names := make([]string, 0, len(ms.Spec.Sources))
	for _, src := range ms.Spec.Sources {
		names = append(names, src.Name)
	}
	for _, name := range st.sourceNames {
		if !slices.Contains(names, name) {
			forgetSourceMetrics(ms.Namespace, ms.Name, name)
		}
	}
	st.sourceNames = names
}

// fetchGit reads a git source through Sources, with the Secrets its
// secretRef names read as the ManifestSync's service account, and counts
// the read by result.
func (r *Reconciler) fetchGit(ctx context.Context, ms *v1alpha1.ManifestSync, src *v1alpha1.Source) (*engine.Snapshot, error) {
	if r.Sources == nil {
		return nil, errGitNotWired
	}
	secrets, err := r.reader(ms)
	if err != nil {
		return nil, err
	}
	snap, err := r.Sources.Fetch(ctx, ms, src, secrets)
	gitFetchesTotal.WithLabelValues(ms.Namespace, ms.Name, src.Name, fetchResult(err)).Inc()
	return snap, err
}

// objectRef is an object source, resolved: its kind and where it lives.
type objectRef struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	cluster   string // "" or a remote one (sourceCluster.ref)
}

func (o objectRef) String() string {
	return v1alpha1.ObjectID{Namespace: o.namespace, Name: o.name, Group: o.gvk.Group, Kind: o.gvk.Kind}.String()
}

// indexKey is the object's key in the ManifestSync index of object sources.
func (o objectRef) indexKey() string {
	return o.gvk.Group + "/" + o.gvk.Kind + "/" + o.namespace + "/" + o.name
}

// objectRefOf resolves an object source of ms; the namespace defaults to
// the ManifestSync's.
func objectRefOf(ms *v1alpha1.ManifestSync, o *v1alpha1.ObjectSource) (objectRef, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return objectRef{}, err
	}
	ns := o.Namespace
	if ns == "" {
		ns = ms.Namespace
	}
	return objectRef{gvk: gv.WithKind(o.Kind), namespace: ns, name: o.Name}, nil
}

// objectSource reads an object source. The body is read from the API
// server only when the object's resourceVersion, as the metadata cache
// sees it, differs from the snapshot read last; steady state reads nothing.
func (r *Reconciler) objectSource(ctx context.Context, ms *v1alpha1.ManifestSync, sc *sourceCluster, o *v1alpha1.ObjectSource, st *syncState) (*engine.Snapshot, error) {
	ref, err := objectRefOf(ms, o)
	if err != nil {
		return nil, err
	}
	ref.cluster = sc.ref
	cached, err := sc.object(ctx, ref.gvk, ref.namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: watching: %w", ref, err)
	}
	key := client.ObjectKey{Namespace: ref.namespace, Name: ref.name}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(ref.gvk)
	if err := cached.Get(ctx, key, meta); err == nil {
		if snap := st.sources[ref]; snap != nil && snap.Revision == "resourceVersion:"+meta.ResourceVersion {
			if err := sc.allowed(ms, ref, meta.Annotations); err != nil {
				return nil, err
			}
			return snap, nil
		}
	}
	// The body is read as the ManifestSync's service account, if any: a
	// tenant reads only what its account may.
	reader, err := sc.bodies(ms)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(ref.gvk)
	if err := reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s not found", ref)
		}
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if err := sc.allowed(ms, ref, obj.GetAnnotations()); err != nil {
		return nil, err
	}
	// Scripts see the object as users wrote it, not the server's
	// bookkeeping of who wrote which field.
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	snap := source.ObjectSnapshot(obj.Object)
	st.sources[ref] = snap
	return snap, nil
}

// allowed reports whether ms may read the object source ref, whose
// annotations are given: an object of ms's own namespace always, one of
// another namespace only when it shares itself with ms's namespace.
func allowed(ms *v1alpha1.ManifestSync, ref objectRef, annotations map[string]string) error {
	if ref.namespace == ms.Namespace {
		return nil
	}
	for _, ns := range strings.Split(annotations[AllowNamespacesAnnotation], ",") {
		if ns = strings.TrimSpace(ns); ns == "*" || ns == ms.Namespace {
			return nil
		}
	}
	return fmt.Errorf("%s is in another namespace and its annotation %s does not list %q", ref, AllowNamespacesAnnotation, ms.Namespace)
}

// sourceIndexKeys are the index keys of every object source of ms.
func sourceIndexKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, s := range ms.Spec.Sources {
		if s.Object == nil || s.Cluster != nil { // a remote one's events come from its cluster
			continue
		}
		if ref, err := objectRefOf(ms, s.Object); err == nil {
			keys = append(keys, ref.indexKey())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
