package shard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// TestReplica: a replica reconciles only its own ManifestSyncs, lets go of
// a draining one by removing both labels, and its fence cuts a reconcile
// in flight short before its Lease expires even while the operator's
// shutdown grace would let it run on.
func TestReplica(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	var blocked atomic.Bool
	m := &Member{Client: blockable(t, &blocked), Namespace: ns, ID: "replica-f",
		LeaseDuration: testLease, RenewDeadline: testLease - testMargin, RetryPeriod: testRenew}
	// A ManifestSync an earlier process of this ID owned: the replica
	// lets go of it before it reconciles anything.
	earlier := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "earlier", Labels: map[string]string{OwnerLabel: "replica-f"}},
		Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
	if err := env.Client.Create(context.Background(), earlier); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	go func() { _ = m.Run(mctx) }()
	for deadline := time.Now().Add(10 * time.Second); m.Deadline().IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no Lease")
		}
	}
	mk := func(name string, labels map[string]string) reconcile.Request {
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
		if err := env.Client.Create(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		return reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	}
	var calls atomic.Int32
	type cut struct {
		cause error
		at    time.Time
	}
	cuts := make(chan cut, 1)
	block := false
	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		calls.Add(1)
		if block {
			<-ctx.Done()
			cuts <- cut{context.Cause(ctx), time.Now()}
		}
		return reconcile.Result{}, nil
	})
	// Its cache is stale for one ManifestSync: it still shows it labelled
	// with this replica, which the sharder moved a moment before.
	stale := &staleReader{Reader: env.Client, owner: map[string]string{"moved": "replica-f"}}
	rep := &Replica{Reader: stale, Client: env.Client, APIReader: env.Client, ID: "replica-f", Member: m, ShutdownGrace: time.Minute}
	r := rep.Wrap(inner)
	ctx := context.Background()
	// Nothing is reconciled before Start has let go of the earlier
	// process's ManifestSyncs.
	early, earlyCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := r.Reconcile(early, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(earlier)}); err != nil || calls.Load() != 0 {
		t.Fatalf("a reconcile before Start: err %v, %d reconciles", err, calls.Load())
	}
	earlyCancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() { _ = rep.Start(sctx) }()
	select {
	case <-rep.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the replica never became ready")
	}
	var was v1alpha1.ManifestSync
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(earlier), &was); err != nil {
		t.Fatal(err)
	}
	if o, ok := was.Labels[OwnerLabel]; ok {
		t.Errorf("the earlier process's ManifestSync is still labelled %q", o)
	}
	moved := mk("moved", map[string]string{OwnerLabel: "replica-g"})
	if _, err := r.Reconcile(ctx, moved); err != nil || calls.Load() != 0 {
		t.Fatalf("a ManifestSync the stale cache shows as its own, the API server as another's: err %v, %d reconciles", err, calls.Load())
	}

	other := mk("other", map[string]string{OwnerLabel: "replica-g"})
	if _, err := r.Reconcile(ctx, other); err != nil || calls.Load() != 0 {
		t.Fatalf("another replica's ManifestSync: err %v, %d reconciles", err, calls.Load())
	}
	own := mk("own", map[string]string{OwnerLabel: "replica-f"})
	if _, err := r.Reconcile(ctx, own); err != nil || calls.Load() != 1 {
		t.Fatalf("its own ManifestSync: err %v, %d reconciles", err, calls.Load())
	}
	draining := mk("draining", map[string]string{OwnerLabel: "replica-f", DrainLabel: "replica-g"})
	if _, err := r.Reconcile(ctx, draining); err != nil || calls.Load() != 1 {
		t.Fatalf("a draining ManifestSync: err %v, %d reconciles", err, calls.Load())
	}
	var got v1alpha1.ManifestSync
	if err := env.Client.Get(ctx, draining.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels[OwnerLabel]; ok || got.Labels[DrainLabel] != "" {
		t.Errorf("a drain not acknowledged: labels %v", got.Labels)
	}
	// A deleted (or moved) one reaches the reconciler, to be forgotten.
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "gone"}}); err != nil || calls.Load() != 2 {
		t.Fatalf("a gone ManifestSync: err %v, %d reconciles", err, calls.Load())
	}

	// A reconcile in flight while the operator shuts down (grace: a
	// minute) and the replica's renewals fail.
	block = true
	shutdown, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = r.Reconcile(shutdown, own) }()
	time.Sleep(100 * time.Millisecond)
	stop()
	select {
	case c := <-cuts:
		t.Fatalf("the reconcile was cut at shutdown, within its grace: %v", c.cause)
	case <-time.After(300 * time.Millisecond):
	}
	blocked.Store(true)
	var c cut
	select {
	case c = <-cuts:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence never cut the reconcile")
	}
	<-done
	if !errors.Is(c.cause, ErrFenced) {
		t.Errorf("cut by %v, want ErrFenced", c.cause)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: LeaseName("replica-f")}, &l); err != nil {
		t.Fatal(err)
	}
	if expiry := l.Spec.RenewTime.Add(testLease); !c.at.Before(expiry) {
		t.Errorf("the reconcile was cut at %s, not before the Lease expired at %s", c.at, expiry)
	}
	// Fenced, it writes nothing more: not even a drain's acknowledgement.
	block = false
	drained := mk("drained-late", map[string]string{OwnerLabel: "replica-f", DrainLabel: "replica-g"})
	if _, err := r.Reconcile(ctx, drained); err != nil || calls.Load() != 3 {
		t.Fatalf("a fenced replica: err %v, %d reconciles (want no more)", err, calls.Load())
	}
	if err := env.Client.Get(ctx, drained.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[OwnerLabel] != "replica-f" {
		t.Errorf("a fenced replica wrote labels %v", got.Labels)
	}
}

// staleReader is a cache that lags: it shows the owner label of the
// ManifestSyncs named in owner as it was before.
type staleReader struct {
	client.Reader
	owner map[string]string
}

func (s *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if o, ok := s.owner[key.Name]; ok {
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[OwnerLabel] = o
		obj.SetLabels(l)
	}
	return nil
}
