package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

var (
	// env is the API server every test of the package shares.
	env *testenv.Env
	// reconciler is the one the manager runs; tests call it directly to
	// force resyncs.
	reconciler *Reconciler
)

// repos stands in for the git provider: it serves the snapshots of the
// URLs it holds and, like the operator without one, fails the others.
var repos = fakeRepos{
	"test://kustomize": {Revision: "main@sha1:4f2c0000", Files: map[string][]byte{
		"base/kustomization.yaml":          []byte("resources: [cm.yaml]\n"),
		"base/cm.yaml":                     []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {env: base}\n"),
		"overlays/prod/kustomization.yaml": []byte("resources: [../../base]\nnamePrefix: prod-\n"),
	}},
}

type fakeRepos map[string]*engine.Snapshot

// Fetch reads the source's secretRef, as the git provider does, with the
// reader the reconciler gives.
func (f fakeRepos) Fetch(ctx context.Context, ms *v1alpha1.ManifestSync, src *v1alpha1.Source, secrets client.Reader) (*engine.Snapshot, error) {
	if ref := src.Git.SecretRef; ref != nil {
		if err := secrets.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: ref.Name}, &corev1.Secret{}); err != nil {
			return nil, fmt.Errorf("secretRef %s/%s: %w", ms.Namespace, ref.Name, err)
		}
	}
	if snap := f[src.Git.URL]; snap != nil {
		return snap, nil
	}
	return nil, errGitNotWired
}

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env, testenv.Second(&remoteEnv), startOperator))
}

// startOperator runs the controller manager against env, as `engine
// operator` does, with short retries. MANIFESTSYNC_TEST_LOG=1 shows its logs.
func startOperator(e *testenv.Env) (func(), error) {
	log := logr.Discard()
	if os.Getenv("MANIFESTSYNC_TEST_LOG") != "" {
		log = zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
	}
	ctrl.SetLogger(log)
	skip := true
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	reconciler = &Reconciler{
		Options: Options{
			RetryMin: 100 * time.Millisecond, RetryMax: 2 * time.Second,
			RemoteTimeout: 2 * time.Second, DeletionTimeout: deletionTimeout,
			Evaluator: evaluators,
		},
		Sources: repos,
	}
	if err := reconciler.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, errors.Join(errors.New("the manager's cache did not sync"), <-done)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "the manager stopped with: %v\n", err)
		}
	}, nil
}
