package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/worker"
	helmrender "github.com/manifestsync/manifestsync/helm"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// The bounds of one evaluation for the web UI's diff view: the worker's
// memory (as --max-memory's default) and time (as the operator's default
// evaluation timeout), and the time to read the sources.
const (
	uiEvalTimeout  = 30 * time.Second
	uiFetchTimeout = 60 * time.Second
	uiMaxObjects   = 5000 // objects one object set source reads
)

// uiEvaluator evaluates a ManifestSync of the cluster as the operator
// would now, for the web UI's diff view (`engine ui`, `engine operator
// --ui-bind-address`). Its sources are read as its spec says, through the
// same source.Resolver as the operator and the CLI: git with the git
// provider, charts with helm/charts, the credentials of their secretRefs
// and the object and object set sources read through the client of the
// request, which is the user's (their kubeconfig, or impersonation of
// them), within the operator's allow-list (controller.SharedWith). The
// evaluation runs in the sandboxed worker pool of the offline commands.
type uiEvaluator struct {
	pool *worker.Pool
	// git is the evaluator's own: `engine operator` keeps its GitCache in
	// gitCacheDir, and a cache directory is one Fetcher's at a time.
	git *git.Fetcher
}

// newUIEvaluator starts the worker pool of command's evaluations (one
// worker of the default --max-memory, killed at uiEvalTimeout) and returns
// the Evaluator and what stops the pool and removes its git cache (a
// temporary directory).
func newUIEvaluator(cmdName string) (inspect.Evaluator, func(), error) {
	dir, err := os.MkdirTemp("", "manifestsync-ui-eval-git-")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the UI's git cache: %w", cmdName, err)
	}
	pool, stop, err := newSandbox(cmdName, defaultMaxMemory, uiEvalTimeout)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	e := &uiEvaluator{pool: pool, git: git.New(git.Options{CacheDir: dir, Timeout: uiFetchTimeout})}
	return e, func() { stop(); _ = os.RemoveAll(dir) }, nil
}

// Evaluate implements inspect.Evaluator. Its errors name the source or the
// ManifestSync, and carry no Secret value the evaluation read.
func (e *uiEvaluator) Evaluate(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error) {
	name := ms.Namespace + "/" + ms.Name
	fctx, cancel := context.WithTimeout(ctx, uiFetchTimeout)
	defer cancel()
	res := source.Resolver{
		Namespace: ms.Namespace,
		Git:       git.Provider{Fetcher: e.git, Credentials: inspect.GitCredentials(c, ms.Namespace)},
		Helm:      charts.Provider{Fetcher: helmFetcher(), Credentials: inspect.HelmCredentials(c, ms.Namespace)},
		Objects: func(src *v1alpha1.Source) (source.ObjectReader, error) {
			if src.Cluster != nil {
				return nil, fmt.Errorf("source %q: a source of another cluster is read by the operator only", src.Name)
			}
			return userObjects{c: c, home: ms.Namespace}, nil
		},
	}
	snaps, err := res.Resolve(fctx, ms.Spec.Sources)
	if err != nil {
		if fctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("ManifestSync %s: reading its sources: not done within %v: %w", name, uiFetchTimeout, err)
		}
		return nil, fmt.Errorf("ManifestSync %s: %w", name, err)
	}
	opts := engine.Options{Scope: clusterScope(c.RESTMapper())}
	caps := capabilityFlags{kubeVersion: helmrender.DefaultKubeVersion}
	if err := caps.options("ui", &opts); err != nil {
		return nil, err
	}
	for _, t := range ms.Spec.Targets {
		if t.NamespaceSelector == nil {
			continue
		}
		if opts.Namespaces, err = controller.Namespaces(ctx, c); err != nil {
			return nil, fmt.Errorf("ManifestSync %s: %w", name, err)
		}
		break
	}
	out, err := e.pool.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Snapshots: snaps, Name: ms.Name}, opts)
	if k, ok := errors.AsType[*worker.KilledError](err); ok {
		return nil, fmt.Errorf("ManifestSync %s: evaluation stopped: %w", name, k)
	}
	if err != nil {
		return nil, fmt.Errorf("ManifestSync %s: %w", name, err)
	}
	return out, nil
}

// userObjects reads object and object set sources through the user's
// client, within the operator's allow-list: an object of another
// namespace only when it shares itself with the ManifestSync's.
type userObjects struct {
	c    client.Reader
	home string
}

// Get implements source.ObjectReader.
func (u userObjects) Get(ctx context.Context, o v1alpha1.ObjectSource) (map[string]any, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return nil, err
	}
	id := v1alpha1.ObjectID{Namespace: o.Namespace, Name: o.Name, Group: gv.Group, Kind: o.Kind}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(o.Kind))
	err = u.c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, obj)
	switch {
	case apierrors.IsNotFound(err) && o.Namespace != u.home, err == nil && !controller.SharedWith(u.home, o.Namespace, obj.GetAnnotations()):
		// One error whether it is missing or unshared, as the operator's.
		return nil, fmt.Errorf("%s: access refused: not found, or not shared with namespace %q (annotation %s)", id, u.home, controller.AllowNamespacesAnnotation)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s %w", id, source.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	return obj.Object, nil
}

// List implements source.ObjectReader for the object sets of one
// namespace and of named kinds; the others (a namespaceSelector, a whole
// namespace, whose kinds the operator discovers) are the operator's alone.
func (u userObjects) List(ctx context.Context, name string, set *engine.ObjectSet) ([]map[string]any, error) {
	if set.WholeNamespace() || set.Namespace == "" {
		return nil, fmt.Errorf("source %q: an object set of a namespaceSelector or of a whole namespace is not evaluated here: see the operator's status", name)
	}
	var out []map[string]any
	for _, gvk := range set.Kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := u.c.List(ctx, list, client.InNamespace(set.Namespace), client.MatchingLabelsSelector{Selector: set.Labels}, client.Limit(uiMaxObjects)); err != nil {
			return nil, fmt.Errorf("source %q: listing %s in %s: %w", name, gvk.Kind, set.Namespace, err)
		}
		if list.GetContinue() != "" {
			return nil, fmt.Errorf("source %q: more than %d %s in %s", name, uiMaxObjects, gvk.Kind, set.Namespace)
		}
		denied := 0
		for i := range list.Items {
			obj := &list.Items[i]
			obj.SetGroupVersionKind(gvk)
			if !set.Selects(gvk, obj) {
				continue
			}
			if !controller.SharedWith(u.home, set.Namespace, obj.GetAnnotations()) {
				denied++
				continue
			}
			unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
			if set.SelectsBody(obj.Object) {
				out = append(out, obj.Object)
			}
		}
		if denied > 0 {
			return nil, fmt.Errorf("source %q: %d %s of %s not shared with namespace %q (annotation %s)", name, denied, gvk.Kind, set.Namespace, u.home, controller.AllowNamespacesAnnotation)
		}
	}
	return out, nil
}
