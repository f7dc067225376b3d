package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/worker"
	helmrender "github.com/manifestsync/manifestsync/helm"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// The bounds of one evaluation for the web UI's diff view: the worker's
// memory (as --max-memory's default) and time (as the operator's default
// evaluation timeout), the time to read the sources, and the objects the
// object and object set sources may read (boundedReader).
const (
	uiEvalTimeout  = 30 * time.Second
	uiFetchTimeout = 60 * time.Second
	uiMaxObjects   = 5000
)

// uiEvaluator evaluates a ManifestSync of the cluster as the operator
// would now, for the web UI's diff view (`engine ui`, `engine operator
// --ui-bind-address`). Its sources are read as its spec says, through the
// same source.Resolver as the operator and the CLI: git with the git
// provider, charts with helm/charts, the credentials of their secretRefs
// and the object and object set sources (every form) read through the
// client of the request, which is the user's (their kubeconfig, or
// impersonation of them), by the operator's own code
// (controller.ObjectReaderAs: its selection, its allow-list, its errors).
// Sources of another cluster are read with the credentials of their
// kubeconfig Secret once the user has read it (controller.RemoteReaderAs):
// a user who may not read the Secret is refused. The evaluation runs in the
// sandboxed worker pool of the offline commands; the Secrets its sources
// read are known to the result's Redactor, as the operator's are.
type uiEvaluator struct {
	pool *worker.Pool // one worker, stopped uiIdle after the last diff
	// git is the evaluator's own: `engine operator` keeps its GitCache in
	// gitCacheDir, and a cache directory is one Fetcher's at a time.
	git *git.Fetcher
	// kinds discovers the kinds of the whole-namespace object sets; nil
	// without a config.
	kinds discovery.DiscoveryInterface
}

// uiIdle is how long the web UI's evaluation worker stays after its last
// diff.
const uiIdle = 5 * time.Minute

// newUIEvaluator makes the worker pool of command's evaluations (one
// worker of the default --max-memory, killed at uiEvalTimeout, started at
// the first diff and stopped uiIdle after the last, so that a UI nobody
// asks for a diff costs no process) and returns
// the Evaluator and what stops the pool and removes its git cache (a
// temporary directory). cfg is the UI's (Options.Config): its discovery
// gives the kinds of the whole-namespace object sets, as the operator's
// discovery gives them to the operator; nil leaves that form failing.
func newUIEvaluator(cmdName string, cfg *rest.Config) (inspect.Evaluator, func(), error) {
	var dc discovery.DiscoveryInterface
	if cfg != nil {
		dcfg := rest.CopyConfig(cfg)
		dcfg.Timeout = uiFetchTimeout
		d, err := discovery.NewDiscoveryClientForConfig(dcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: the UI's discovery: %w", cmdName, err)
		}
		dc = d
	}
	dir, err := os.MkdirTemp("", "manifestsync-ui-eval-git-")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the UI's git cache: %w", cmdName, err)
	}
	pool, err := newSandboxPool(cmdName, defaultMaxMemory, uiEvalTimeout, uiIdle)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	e := &uiEvaluator{pool: pool, git: git.New(git.Options{CacheDir: dir, Timeout: uiFetchTimeout}), kinds: dc}
	return e, func() { _ = pool.Close(); _ = os.RemoveAll(dir) }, nil
}

// Evaluate implements inspect.Evaluator. Its errors name the source or the
// ManifestSync, and carry no Secret value the evaluation read.
func (e *uiEvaluator) Evaluate(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error) {
	name := ms.Namespace + "/" + ms.Name
	fctx, cancel := context.WithTimeout(ctx, uiFetchTimeout)
	defer cancel()
	objects := controller.ObjectReaderAs(ms, &boundedReader{Reader: c}, e.kinds)
	res := source.Resolver{
		Namespace: ms.Namespace,
		Git:       git.Provider{Fetcher: e.git, Credentials: inspect.GitCredentials(c, ms.Namespace), Keys: git.SecretKeys(ms.Namespace, uiSecrets(c, ms.Namespace))},
		Helm:      charts.Provider{Fetcher: helmFetcher(), Credentials: inspect.HelmCredentials(c, ms.Namespace)},
		OCI:       ociCache().Provider(uiSecrets(c, ms.Namespace)),
		HTTP:      httpCache().Provider(uiSecrets(c, ms.Namespace)),
		Objects: func(src *v1alpha1.Source) (source.ObjectReader, error) {
			if src.Cluster != nil {
				// The kubeconfig Secret is read as the user: one who may
				// read it could use its credentials themselves.
				return controller.RemoteReaderAs(fctx, ms, src.Cluster, c, uiFetchTimeout,
					func(r client.Reader) client.Reader { return &boundedReader{Reader: r} })
			}
			return objects, nil
		},
	}
	dec, err := uiDecrypter(fctx, c, ms)
	if err != nil {
		return nil, fmt.Errorf("ManifestSync %s: %w", name, err)
	}
	res.Decrypt = dec
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

// boundedReader is the user's client as one evaluation's object and
// object set sources read it, bounded: a list holds at most uiMaxObjects
// items (a longer one fails the source), and at most uiMaxObjects reads
// of single objects (metadata or whole) are made.
type boundedReader struct {
	client.Reader
	reads atomic.Int64
}

// Get implements client.Reader.
func (b *boundedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if b.reads.Add(1) > uiMaxObjects {
		return fmt.Errorf("more than %d objects read: the diff view's bound", uiMaxObjects)
	}
	return b.Reader.Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (b *boundedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := b.Reader.List(ctx, list, append(opts, client.Limit(uiMaxObjects))...); err != nil {
		return err
	}
	if list.GetContinue() != "" {
		return fmt.Errorf("listing %s: more than %d objects: the diff view's bound", list.GetObjectKind().GroupVersionKind().Kind, uiMaxObjects)
	}
	return nil
}

// uiSecrets reads the Secrets oci and http sources name in namespace as
// the UI's user (c impersonates them), as inspect.GitCredentials does:
// one who may not read a Secret gets no diff through its credentials.
func uiSecrets(c client.Reader, namespace string) source.Secrets {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &secret); err != nil {
			return nil, fmt.Errorf("secretRef %s/%s: %w", namespace, ref.Name, err)
		}
		return secret.Data, nil
	}
}
