// Command naive is W6's baseline: a Secret replicator written the obvious
// way with controller-runtime. Its manager's cached client watches and
// caches every Secret and Namespace of the cluster in full, and each
// selected namespace is reconciled by reading the source and the copy from
// that cache and creating or updating the copy. It is what the operator's
// memory is compared with; it is built and started by bench/w6.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// copyLabel marks the copies it makes.
const copyLabel = "bench.manifestsync.dev/naive-copy"

func main() {
	source := flag.String("source", "", "the source Secret, namespace/name")
	selector := flag.String("selector", "", "label selector of the target namespaces")
	flag.Parse()
	// --kubeconfig is controller-runtime's own flag, read by GetConfig.
	if err := run(*source, *selector); err != nil {
		fmt.Fprintln(os.Stderr, "naive:", err)
		os.Exit(1)
	}
}

func run(source, selector string) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200 // as the operator's defaults
	ns, name, ok := cut(source)
	if !ok {
		return fmt.Errorf("--source %q: want namespace/name", source)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	r := &replicator{client: mgr.GetClient(), source: types.NamespacedName{Namespace: ns, Name: name}, selector: sel}
	// Every namespace is a request; a change of the source enqueues every
	// selected namespace, a change of a copy its own.
	err = ctrl.NewControllerManagedBy(mgr).
		Named("naive").
		For(&corev1.Namespace{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.forSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return mgr.Start(ctx)
}

func cut(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

type replicator struct {
	client   client.Client
	source   types.NamespacedName
	selector labels.Selector
}

func (r *replicator) forSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() == r.source.Namespace && o.GetName() == r.source.Name {
		var list corev1.NamespaceList
		if err := r.client.List(ctx, &list, client.MatchingLabelsSelector{Selector: r.selector}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i, ns := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: ns.Name}}
		}
		return reqs
	}
	if o.GetName() == r.source.Name && o.GetLabels()[copyLabel] != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	}
	return nil
}

// Reconcile makes the copy of the source in one namespace.
func (r *replicator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var ns corev1.Namespace
	if err := r.client.Get(ctx, req.NamespacedName, &ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !r.selector.Matches(labels.Set(ns.Labels)) || ns.Name == r.source.Namespace {
		return reconcile.Result{}, nil
	}
	var src corev1.Secret
	if err := r.client.Get(ctx, r.source, &src); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var cp corev1.Secret
	err := r.client.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: src.Name}, &cp)
	switch {
	case apierrors.IsNotFound(err):
		cp = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: src.Name, Labels: map[string]string{copyLabel: "true"}},
			Type:       src.Type,
			Data:       src.Data,
		}
		return reconcile.Result{}, r.client.Create(ctx, &cp)
	case err != nil:
		return reconcile.Result{}, err
	case maps.EqualFunc(cp.Data, src.Data, func(a, b []byte) bool { return string(a) == string(b) }):
		return reconcile.Result{}, nil
	}
	cp.Data = src.Data
	return reconcile.Result{}, r.client.Update(ctx, &cp)
}
