package shard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// blockable is a client of the real API server whose requests hang until
// their context ends while blocked is set: a replica cut off from the API
// server (or paused), as its Lease renewals see it.
func blockable(t *testing.T, blocked *atomic.Bool) client.Client {
	return gated(t, func(ctx context.Context) error {
		if blocked.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
}

// gated is a client of the real API server whose Gets, Updates and
// Creates first call wait, and fail with its error.
func gated(t *testing.T, wait func(ctx context.Context) error) client.Client {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := wait(ctx); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := wait(ctx); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := wait(ctx); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	})
}

func liveIDs(t *testing.T, tr *Tracker) map[string]bool {
	t.Helper()
	live, err := tr.Live(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range live {
		ids[m.ID] = true
	}
	return ids
}

// TestMemberFencesBeforeExpiry: a replica that cannot renew its Lease
// stops writing (its fence falls) before the Lease expires, by the clock
// of the API server's record (renewTime + leaseDurationSeconds) and by the
// sharder's view (the Tracker still sees it live when it fences, and not
// live after expiry).
func TestMemberFencesBeforeExpiry(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	var blocked atomic.Bool
	fences := 0
	m := &Member{
		Client: blockable(t, &blocked), Namespace: ns, ID: "replica-a",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond,
		OnFence: func() { fences++ },
	}
	// Before its first renewal a replica owns nothing.
	early, cancelEarly := m.Fence(context.Background())
	if early.Err() == nil || !errors.Is(context.Cause(early), ErrFenced) {
		t.Fatal("a fence taken before the Lease exists is open")
	}
	cancelEarly()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	tr := &Tracker{Reader: env.Client, Namespace: ns}
	deadline := time.Now().Add(10 * time.Second)
	for m.Deadline().IsZero() || !liveIDs(t, tr)["replica-a"] {
		if time.Now().After(deadline) {
			t.Fatal("the replica's Lease never became live")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "manifestsync-shard-replica-a"}, &l); err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "replica-a" || *l.Spec.LeaseDurationSeconds != 3 || l.Spec.RenewTime == nil {
		t.Fatalf("lease spec %+v", l.Spec)
	}
	// Renewals go on while the client answers.
	first := l.Spec.RenewTime.Time
	time.Sleep(time.Second)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&l), &l); err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.After(first) {
		t.Fatal("the Lease was not renewed")
	}

	fctx, fcancel := m.Fence(context.Background())
	defer fcancel()
	blocked.Store(true)
	select {
	case <-fctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the fence never fell")
	}
	fellAt := time.Now()
	if !errors.Is(context.Cause(fctx), ErrFenced) {
		t.Errorf("fence cause %v", context.Cause(fctx))
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&l), &l); err != nil {
		t.Fatal(err)
	}
	expiry := l.Spec.RenewTime.Add(3 * time.Second)
	if !fellAt.Before(expiry) {
		t.Errorf("fence fell at %s, not before the Lease expired at %s", fellAt, expiry)
	}
	if lead := expiry.Sub(fellAt); lead < 500*time.Millisecond {
		t.Errorf("fence fell only %s before expiry, want about the 1s margin", lead)
	}
	if !liveIDs(t, tr)["replica-a"] {
		t.Error("the sharder's view has the replica dead when its fence falls")
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrFenced) {
			t.Errorf("Run returned %v, want ErrFenced", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run went on after the fence fell")
	}
	// A new reconcile after the fall is fenced at once.
	late, lcancel := m.Fence(context.Background())
	defer lcancel()
	if late.Err() == nil {
		t.Error("a fence taken after the fall is open")
	}
	if fences != 1 {
		t.Errorf("OnFence called %d times, want 1", fences)
	}
	// The sharder sees it expire, within a lease duration of the renewal
	// it last saw, and not before.
	for liveIDs(t, tr)["replica-a"] {
		if time.Now().After(expiry.Add(5 * time.Second)) {
			t.Fatal("the replica's Lease never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if deadAt := time.Now(); deadAt.Before(expiry) {
		t.Errorf("the sharder's view has the replica dead at %s, before its Lease expired at %s", deadAt, expiry)
	}
}

// TestMemberSlowAPIServer: an API server that answers each request more
// slowly than RetryPeriod, but well within RenewDeadline (a loaded control
// plane), keeps the replica: its renewals land, late, and its fence does
// not fall. A renewal cut at RetryPeriod would never land there.
func TestMemberSlowAPIServer(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	var slow atomic.Bool
	const delay = 400 * time.Millisecond // each request; a renewal is a Get and an Update
	slowed := gated(t, func(ctx context.Context) error {
		if !slow.Load() {
			return nil
		}
		select {
		case <-time.After(delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	m := &Member{Client: slowed, Namespace: ns, ID: "replica-slow",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-m.Acquired():
	case <-time.After(10 * time.Second):
		t.Fatal("the replica never took its Lease")
	}
	slow.Store(true)
	key := client.ObjectKey{Namespace: ns, Name: LeaseName(m.ID)}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, key, &l); err != nil {
		t.Fatal(err)
	}
	before := l.Spec.RenewTime.Time
	// Three RenewDeadlines of slow answers: the fence would have fallen
	// after the first.
	end := time.Now().Add(3 * m.RenewDeadline)
	for time.Now().Before(end) {
		select {
		case <-m.Fenced():
			t.Fatalf("the fence fell after %s of answers %s slow (RetryPeriod %s, RenewDeadline %s)",
				time.Since(end.Add(-3*m.RenewDeadline)).Round(time.Millisecond), delay, m.RetryPeriod, m.RenewDeadline)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := env.Client.Get(ctx, key, &l); err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.After(before) {
		t.Errorf("the Lease was not renewed through slow answers: renewTime %s, before %s", l.Spec.RenewTime, before)
	}
}

// TestMemberRelease: a replica that stops deletes its Lease, and is not
// live from then on; a Lease that does not name its replica is no member.
func TestMemberRelease(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	m := &Member{Client: env.Client, Namespace: ns, ID: "replica-b", RetryPeriod: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	tr := &Tracker{Reader: env.Client, Namespace: ns}
	// A forged Lease whose holder is not its name's replica.
	other := "replica-c"
	forged := &coordinationv1.Lease{}
	forged.Namespace, forged.Name = ns, LeaseName("replica-x")
	forged.Spec.HolderIdentity = &other
	if err := env.Client.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !liveIDs(t, tr)["replica-b"] {
		if time.Now().After(deadline) {
			t.Fatal("the replica's Lease never became live")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ids := liveIDs(t, tr); len(ids) != 1 {
		t.Errorf("live members %v, want replica-b alone", ids)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := m.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if liveIDs(t, tr)["replica-b"] {
		t.Error("a released replica is live")
	}
	if err := ValidateID("Bad_ID"); err == nil {
		t.Error("an ID that is no label value was accepted")
	}
}

// TestMemberGuard: a client whose transport the Member guards writes
// only while the replica's fence stands: not before its first renewal,
// not once its renewals fail past the deadline (even before the fence's
// timer fires, as in a process resumed after a pause); reads pass.
func TestMemberGuard(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	var blocked atomic.Bool
	m := &Member{Client: blockable(t, &blocked), Namespace: ns, ID: "replica-g",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(m.Guard)
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	if err := c.Create(ctx, cm("before")); !errors.Is(err, ErrFenced) {
		t.Errorf("a write before the first renewal: %v, want ErrFenced", err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = m.Run(mctx) }()
	for deadline := time.Now().Add(10 * time.Second); m.Deadline().IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no Lease")
		}
	}
	if err := c.Create(ctx, cm("while-live")); err != nil {
		t.Errorf("a write while the Lease is renewed: %v", err)
	}
	blocked.Store(true)
	// Past the deadline, whether or not the timer has fired yet.
	time.Sleep(time.Until(m.Deadline()))
	if m.writable(m.Deadline()) {
		t.Error("writable at the deadline")
	}
	<-m.Fenced()
	if err := c.Create(ctx, cm("after")); !errors.Is(err, ErrFenced) {
		t.Errorf("a write after the fence fell: %v, want ErrFenced", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm("while-live")), &corev1.ConfigMap{}); err != nil {
		t.Errorf("a read after the fence fell: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm("after")), &corev1.ConfigMap{}); err == nil {
		t.Error("the refused write reached the API server")
	}
}

// TestMemberSameID: a second process with the ID of a live one (two
// processes given one ID, or a restart after kill -9 while the first
// still runs) does not take its Lease while it is renewed, and takes it a
// lease duration after the renewals stop.
func TestMemberSameID(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	newMember := func() *Member {
		return &Member{Client: env.Client, Namespace: ns, ID: "twin", LeaseDuration: 3 * time.Second,
			RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	}
	first, second := newMember(), newMember()
	c1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go func() { _ = first.Run(c1) }()
	for deadline := time.Now().Add(10 * time.Second); first.Deadline().IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no Lease")
		}
	}
	c2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	go func() { _ = second.Run(c2) }()
	time.Sleep(4 * time.Second) // more than a lease duration of renewals by first
	if !second.Deadline().IsZero() {
		t.Fatal("a second process took the Lease of a live one with its ID")
	}
	cancel1() // first stops renewing (as if killed: its Lease stays)
	stopped := time.Now()
	for deadline := time.Now().Add(10 * time.Second); second.Deadline().IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second never took the Lease over")
		}
	}
	if took := time.Since(stopped); took < 2*time.Second {
		t.Errorf("the second took the Lease %s after the first stopped, before it could have expired", took)
	}
}

// TestTrackerFirstSight: a new leader's sharder judges a Lease it sees for
// the first time by its renewTime (plus ClockSkew), not a whole duration
// from now: one renewed 20 s ago (15 s Lease) is dead at once, one
// renewed 10 s ago lives until renewTime + 17 s.
func TestTrackerFirstSight(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	now := time.Now()
	for id, ago := range map[string]time.Duration{"old": 20 * time.Second, "recent": 10 * time.Second} {
		rt := metav1.NewMicroTime(now.Add(-ago))
		secs := int32(15)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(id)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &rt}}
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	tr := &Tracker{Reader: env.Client, Namespace: ns, Now: func() time.Time { return now }}
	live, err := tr.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].ID != "recent" {
		t.Fatalf("live %v, want recent alone", live)
	}
	if want := now.Add(-10*time.Second + ClockSkew + 15*time.Second); !live[0].Expires.Equal(want.Truncate(time.Microsecond)) && live[0].Expires.Sub(want).Abs() > time.Millisecond {
		t.Errorf("recent expires at %s, want %s", live[0].Expires, want)
	}
}

// TestMemberTimings: the timings a Member accepts (--shard-lease-duration,
// --shard-renew-deadline, --shard-retry-period): its fence must fall
// before its Lease expires and after more than one renewal was tried, and
// the Lease's whole seconds must be the duration. A Member given others
// writes no Lease, so it never owns anything; one given its own timings
// writes its duration into the Lease and fences at its renew deadline.
func TestMemberTimings(t *testing.T) {
	for _, c := range []struct {
		lease, renew, retry time.Duration
		ok                  bool
	}{
		{DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, true},
		{4 * time.Second, 3 * time.Second, time.Second, true},
		{time.Second, 900 * time.Millisecond, 100 * time.Millisecond, true},
		{15 * time.Second, 15 * time.Second, 2 * time.Second, false},  // fence at expiry: two owners
		{15 * time.Second, 20 * time.Second, 2 * time.Second, false},  // fence after expiry
		{15 * time.Second, 10 * time.Second, 5 * time.Second, false},  // one renewal before the fence
		{15 * time.Second, 10 * time.Second, 10 * time.Second, false}, // none
		{1500 * time.Millisecond, time.Second, 100 * time.Millisecond, false},
		{500 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond, false},
		{15 * time.Second, -time.Second, time.Second, false},
		{15 * time.Second, 10 * time.Second, -time.Second, false},
	} {
		err := ValidateTimings(c.lease, c.renew, c.retry)
		if (err == nil) != c.ok {
			t.Errorf("ValidateTimings(%v, %v, %v) = %v, want ok %v", c.lease, c.renew, c.retry, err, c.ok)
		}
	}

	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := &Member{Client: env.Client, Namespace: ns, ID: "bad", LeaseDuration: 3 * time.Second, RenewDeadline: 3 * time.Second}
	if err := bad.Run(ctx); err == nil || !strings.Contains(err.Error(), "renew deadline") {
		t.Errorf("Run with a renew deadline at the lease's expiry: %v, want it refused", err)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: LeaseName("bad")}, &l); !apierrors.IsNotFound(err) {
		t.Errorf("a Member refused its timings wrote its Lease: %v", err)
	}
	if f, fcancel := bad.Fence(ctx); f.Err() == nil {
		t.Error("a Member refused its timings has an open fence")
	} else {
		fcancel()
	}

	var blocked atomic.Bool
	m := &Member{Client: blockable(t, &blocked), Namespace: ns, ID: "timed",
		LeaseDuration: 4 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	for m.Deadline().IsZero() {
		if ctx.Err() != nil {
			t.Fatal("no Lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: LeaseName("timed")}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 4 {
		t.Errorf("leaseDurationSeconds %v, want 4", l.Spec.LeaseDurationSeconds)
	}
	blocked.Store(true)
	last := m.Deadline().Add(-1500 * time.Millisecond) // the last renewal that got through
	select {
	case err := <-done:
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("Run returned %v, want ErrFenced", err)
		}
	case <-ctx.Done():
		t.Fatal("the fence never fell")
	}
	// The fence fell at its renew deadline after the last renewal, long
	// before the Lease's 4s; the deadline may have moved by a renewal
	// in flight when the client blocked, never by more than a retry.
	if fell := time.Since(last); fell < 1500*time.Millisecond || fell > 3*time.Second {
		t.Errorf("the fence fell %v after the last renewal seen, want the 1.5s renew deadline", fell)
	}
}

// TestMemberResumedPastDeadline: a process resumed after a pause
// (SIGSTOP) past its fence's deadline runs its renewal before the fence's
// timer: the renewal writes nothing (the Lease must not look live again
// for a replica about to exit) and the fence falls.
func TestMemberResumedPastDeadline(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	m := &Member{Client: env.Client, Namespace: ns, ID: "replica-p"}
	m.init()
	ctx := context.Background()
	m.renew(ctx)
	select {
	case <-m.Acquired():
	default:
		t.Fatal("the first renewal did not acquire the Lease")
	}
	key := client.ObjectKey{Namespace: ns, Name: LeaseName("replica-p")}
	var before coordinationv1.Lease
	if err := env.Client.Get(ctx, key, &before); err != nil {
		t.Fatal(err)
	}
	// The pause: the deadline has passed, the timer has not fired.
	m.mu.Lock()
	m.timer.Stop()
	m.deadline = time.Now().Add(-time.Millisecond)
	m.mu.Unlock()
	m.renew(ctx)
	var after coordinationv1.Lease
	if err := env.Client.Get(ctx, key, &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || !after.Spec.RenewTime.Equal(before.Spec.RenewTime) {
		t.Errorf("a renewal past the deadline was written: renewTime %s -> %s", before.Spec.RenewTime, after.Spec.RenewTime)
	}
	select {
	case <-m.Fenced():
	default:
		t.Error("the fence did not fall at a renewal past its deadline")
	}
	if err := m.late(); !errors.Is(err, ErrFenced) {
		t.Errorf("late() = %v, want ErrFenced", err)
	}
}
