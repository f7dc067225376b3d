package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of a Member's timings, those of the operator's leader
// election: a Lease of 15 s, renewed every 2 s; a replica that has not
// renewed for 10 s (the renew deadline) stops writing, 5 s before its
// Lease expires.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrFenced is returned by Member.Run once the replica could not renew its
// Lease in time: it has stopped writing, and should exit (a restarted
// replica joins afresh) rather than write beside the replica its
// ManifestSyncs were given to.
var ErrFenced = errors.New("shard lease not renewed in time: fenced")

// Member is one replica's membership: its Lease, manifestsync-shard-ID in
// Namespace, created and renewed by Run, and the fence that ends its writes
// before that Lease can expire.
type Member struct {
	Client    client.Client
	Namespace string
	ID        string
	// LeaseDuration is written in the Lease (leaseDurationSeconds, by
	// which the sharder judges it expired); the replica renews it every
	// RetryPeriod (an attempt that takes longer delays the next), and its
	// fence falls RenewDeadline after the last
	// successful renewal (measured from before its request was sent).
	// Zero takes the Default constant; ValidateTimings says which others
	// Run accepts.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       logr.Logger
	// OnFence is called once, when the fence falls.
	OnFence func()

	mu       sync.Mutex
	deadline time.Time     // when the fence falls; zero before the first renewal
	fenced   chan struct{} // closed when it has fallen
	first    chan struct{} // closed at the first renewal
	timer    *time.Timer
	once     sync.Once
	// Until the Lease is acquired: the renewTime last seen on a Lease
	// this Member did not write, and when it was first seen.
	acquired  bool
	seenRenew string
	seenAt    time.Time
	// heldLogged is the last errHeld logged.
	heldLogged string
}

// errHeld is a renewal that found the Lease renewed by another process.
var errHeld = errors.New("renewed by another process with this ID")

// LeaseName is the name of the Lease of the replica id.
func LeaseName(id string) string { return LeasePrefix + id }

// ValidateTimings says whether a Member can run with these timings: the
// fence must fall before the Lease expires (renewDeadline < leaseDuration;
// the difference is the margin for clocks that disagree, see Tracker),
// and a renewal must be tried more than once before it falls
// (retryPeriod < renewDeadline/2, as a leader elector's jittered retries
// are). The Lease holds whole seconds, which the sharder reads: a
// duration cut short there would let the sharder move a replica's
// ManifestSyncs before its fence fell.
func ValidateTimings(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	switch {
	case leaseDuration < time.Second || leaseDuration%time.Second != 0:
		return fmt.Errorf("shard lease duration %v: want a whole number of seconds, at least 1s", leaseDuration)
	case renewDeadline <= 0 || renewDeadline >= leaseDuration:
		return fmt.Errorf("shard renew deadline %v: want more than 0 and less than the lease duration %v", renewDeadline, leaseDuration)
	case retryPeriod <= 0 || 2*retryPeriod >= renewDeadline:
		return fmt.Errorf("shard retry period %v: want more than 0 and less than half the renew deadline %v", retryPeriod, renewDeadline)
	}
	return nil
}

// ValidateID says whether id can name a replica: its Lease name and the
// owner label's value must hold it.
func ValidateID(id string) error {
	if id == "" {
		return errors.New("empty replica ID")
	}
	if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
		return fmt.Errorf("replica ID %q: %s", id, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(LeaseName(id)); len(errs) > 0 {
		return fmt.Errorf("replica ID %q: %s", id, strings.Join(errs, "; "))
	}
	return nil
}

func (m *Member) init() {
	m.once.Do(func() {
		if m.LeaseDuration <= 0 {
			m.LeaseDuration = DefaultLeaseDuration
		}
		if m.RenewDeadline <= 0 {
			m.RenewDeadline = DefaultRenewDeadline
		}
		if m.RetryPeriod <= 0 {
			m.RetryPeriod = DefaultRetryPeriod
		}
		m.fenced = make(chan struct{})
		m.first = make(chan struct{})
	})
}

// Fenced is closed when the fence has fallen: from then on the replica
// must write nothing.
func (m *Member) Fenced() <-chan struct{} {
	m.init()
	return m.fenced
}

// Acquired is closed at the Member's first successful renewal: from then
// on the replica may write, until its fence falls.
func (m *Member) Acquired() <-chan struct{} {
	m.init()
	return m.first
}

// Deadline is when the fence falls unless the Lease is renewed before;
// zero before the first renewal.
func (m *Member) Deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deadline
}

// Fence returns a context derived from ctx that is cancelled when the
// fence falls, with ErrFenced as its cause; the reconciler wraps each
// reconcile in it, so that nothing is written once another replica may
// have been given its objects. Before the first renewal it is cancelled at
// once: a replica that has no Lease yet owns nothing.
func (m *Member) Fence(ctx context.Context) (context.Context, context.CancelFunc) {
	m.init()
	m.mu.Lock()
	live := !m.deadline.IsZero()
	m.mu.Unlock()
	select {
	case <-m.fenced:
		live = false
	default:
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if !live {
		cancel(ErrFenced)
		return ctx, func() {}
	}
	go func() {
		select {
		case <-m.fenced:
			cancel(ErrFenced)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Run creates (or takes back) the replica's Lease and renews it every
// RetryPeriod until ctx ends. It returns ErrFenced when the fence fell: no
// renewal succeeded for RenewDeadline. It leaves the
// Lease in place: a replica whose reconciles have all ended calls Release.
func (m *Member) Run(ctx context.Context) error {
	m.init()
	if err := ValidateID(m.ID); err != nil {
		return err
	}
	if err := ValidateTimings(m.LeaseDuration, m.RenewDeadline, m.RetryPeriod); err != nil {
		return fmt.Errorf("replica %s: %w", m.ID, err)
	}
	// The fence's timer outlives Run: reconciles that are still finishing
	// after ctx ended stop when it falls.
	tick := time.NewTicker(m.RetryPeriod)
	defer tick.Stop()
	for {
		m.renew(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-m.fenced:
			return ErrFenced
		case <-tick.C:
		}
	}
}

// renew writes the Lease's renewTime; a success moves the fence. Once the
// fence's deadline has passed it writes nothing: a process resumed after
// a pause (SIGSTOP) past its deadline must not make its Lease look live
// again (the sharder would give ManifestSyncs to a replica that then
// exits); the fence falls instead.
func (m *Member) renew(ctx context.Context) {
	sent := time.Now()
	deadline := m.Deadline()
	if !deadline.IsZero() && !sent.Before(deadline) {
		m.fall()
		return
	}
	// An attempt may take until the fence falls, as client-go's leader
	// election lets it: an API server that answers slower than
	// RetryPeriod (a loaded control plane) keeps the replica; one that has
	// not answered by the deadline is too late. The fence is counted from
	// sent whenever the answer comes, so a slow answer moves it no further.
	end := deadline
	if end.IsZero() {
		end = sent.Add(m.RenewDeadline)
	}
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if err := m.write(rctx, sent); err != nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errHeld):
			// Expected after a restart: said once per renewal seen, not
			// every RetryPeriod.
			if msg := err.Error(); msg != m.heldLogged {
				m.heldLogged = msg
				m.Log.Info("waiting for the shard lease", "lease", LeaseName(m.ID), "reason", msg)
			}
		default:
			m.Log.Error(err, "renewing the shard lease", "lease", LeaseName(m.ID), "fence", m.Deadline())
		}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.fenced:
		return // fallen for good
	default:
	}
	m.deadline = sent.Add(m.RenewDeadline)
	if m.timer == nil {
		close(m.first)
		m.timer = time.AfterFunc(time.Until(m.deadline), m.fall)
	} else {
		m.timer.Reset(time.Until(m.deadline))
	}
}

// fall closes fenced once the deadline has passed (a timer that fires
// just as a renewal moves the deadline waits for the new one).
func (m *Member) fall() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := time.Until(m.deadline); d > 0 {
		m.timer.Reset(d)
		return
	}
	select {
	case <-m.fenced:
		return
	default:
	}
	close(m.fenced)
	m.Log.Info("shard lease not renewed in time: writes stopped", "lease", LeaseName(m.ID))
	fencesTotal.Inc()
	if m.OnFence != nil {
		m.OnFence()
	}
}

func (m *Member) write(ctx context.Context, now time.Time) error {
	key := client.ObjectKey{Namespace: m.Namespace, Name: LeaseName(m.ID)}
	secs := int32(m.LeaseDuration / time.Second)
	t := metav1.NewMicroTime(now)
	var l coordinationv1.Lease
	err := m.Client.Get(ctx, key, &l)
	if apierrors.IsNotFound(err) {
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &m.ID, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t,
			},
		}
		if err := m.late(); err != nil {
			return err
		}
		if err := m.Client.Create(ctx, &l); err != nil {
			return fmt.Errorf("lease %s: %w", key, err)
		}
		m.acquired = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease %s: %w", key, err)
	}
	if !m.acquired {
		// A Lease this process did not write: another process with this
		// ID may still be running (a restart after kill -9, or two
		// processes given one ID). Take it only once it has gone
		// unrenewed for a whole duration, by this process's clock.
		renewed := ""
		if l.Spec.RenewTime != nil {
			renewed = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		dur := m.LeaseDuration
		if l.Spec.LeaseDurationSeconds != nil {
			dur = max(dur, time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)
		}
		if renewed != m.seenRenew || m.seenAt.IsZero() {
			m.seenRenew, m.seenAt = renewed, now
		}
		if renewed != "" && now.Sub(m.seenAt) < dur {
			return fmt.Errorf("lease %s: %w (at %s: a restart after kill -9, or two processes given one ID); taking it once it has gone unrenewed for %s, at %s by this process's clock",
				key, errHeld, renewed, dur, m.seenAt.Add(dur).UTC().Format(time.RFC3339))
		}
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != m.ID {
		l.Spec.AcquireTime = &t
	}
	if !m.acquired {
		l.Spec.AcquireTime = &t
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &m.ID, &secs, &t
	if err := m.late(); err != nil {
		return err
	}
	if err := m.Client.Update(ctx, &l); err != nil {
		return fmt.Errorf("lease %s: %w", key, err)
	}
	m.acquired = true
	return nil
}

// late refuses a renewal about to be sent past the fence's deadline (the
// process paused between reading its Lease and writing it).
func (m *Member) late() error {
	if d := m.Deadline(); !d.IsZero() && !time.Now().Before(d) {
		return fmt.Errorf("lease %s: %w", LeaseName(m.ID), ErrFenced)
	}
	return nil
}

// Release deletes the Lease of a replica that stopped of its own accord
// (after Run returned and every reconcile ended), so that the sharder
// gives its ManifestSyncs to the others without waiting for the Lease to
// expire. A fenced replica keeps it until it expires.
func (m *Member) Release(ctx context.Context) error {
	m.init()
	select {
	case <-m.fenced:
		return nil
	default:
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: LeaseName(m.ID)}}
	if err := m.Client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing lease %s/%s: %w", m.Namespace, l.Name, err)
	}
	return nil
}
