package soak

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// config is what the environment asks of a run.
type config struct {
	duration time.Duration // of the faults, in all phases
	phase    time.Duration // faults run in phases; the fleet must converge after each
	converge time.Duration // the convergence limit after the last fault of a phase
	seed     uint64
}

// convergeRule is issue 12's limit: every ManifestSync converges within
// 10 s of the last fault. It holds in runs of longRun or more; shorter
// runs (the 60 s form of make test, on a loaded machine) get a minute,
// and log the ManifestSyncs slower than the rule.
const (
	convergeRule = 10 * time.Second
	longRun      = 5 * time.Minute
)

func loadConfig(t *testing.T) config {
	t.Helper()
	cfg := config{duration: 60 * time.Second, seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 30s", v)
		}
		cfg.duration = d
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		cfg.seed = n
	}
	cfg.converge = 60 * time.Second
	if cfg.duration >= longRun {
		cfg.converge = convergeRule
	}
	if v := os.Getenv("SOAK_CONVERGE_WITHIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_CONVERGE_WITHIN=%q: %v", v, err)
		}
		cfg.converge = d
	}
	cfg.phase = min(cfg.duration, 3*time.Minute)
	return cfg
}

// run is one soak run.
type run struct {
	t            *testing.T
	cfg          config
	f            *fleet
	op           *operatorProc
	git          *gitServer
	mon          *monitor
	client       client.Client
	remoteClient client.Client
	start        time.Time
	phases       int
	localDown    atomic.Bool
	// local is the run's own control plane, replicas its sharded
	// operators (shards_test.go); nil and empty in TestSoak.
	local    *testenv.Env
	replicas []*replica
	shards   *shardState
	// stuck are the ManifestSyncs that can never sync (hostile_test.go).
	stuck []*stuckSync
	// webhookURL is the operator's receiver; hookTokens the webhook
	// Secrets' tokens, by home namespace.
	webhookURL string
	hookTokens []string

	faultsMu sync.Mutex
	faults   []*fault
	// remoteOutage and gitOutage are held by an outage of that peer
	// from its start to the peer's restart.
	remoteOutage, gitOutage sync.Mutex

	mu        sync.Mutex
	floodPeak int64 // the operator's highest peak RSS after a webhook flood
}

// clusters are the clusters the fleet writes to: this one, and the
// remote one unless the run has none (shards_test.go).
func (r *run) clusters() []string {
	if r.remoteClient == nil {
		return []string{local}
	}
	return []string{local, remote}
}

// logPaths are the log files of the run's operators.
func (r *run) logPaths() []string {
	if len(r.replicas) > 0 {
		var out []string
		for _, p := range r.replicas {
			out = append(out, p.logPaths()...)
		}
		return out
	}
	return []string{r.op.logPath}
}

// localEnv is the control plane of this cluster: the package's, or the
// run's own (shards_test.go).
func (r *run) localEnv() *testenv.Env {
	if r.local != nil {
		return r.local
	}
	return env
}

func (r *run) clientOf(cluster string) client.Client {
	if cluster == remote {
		return r.remoteClient
	}
	return r.client
}

// TestSoak runs the fleet under a random schedule of faults (see the
// package documentation) and fails on every broken invariant, naming the
// object, the invariant and the fault that preceded it.
func TestSoak(t *testing.T) {
	env.Need(t)
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	cfg := loadConfig(t)
	t.Logf("soak: seed %d (SOAK_SEED=%d replays this schedule), faults for %v in phases of %v, convergence limit %v; engine built in %v",
		cfg.seed, cfg.seed, cfg.duration, cfg.phase, cfg.converge, buildTook.Round(100*time.Millisecond))
	klog.SetLogger(logr.Discard()) // the watches' complaints while an API server is stopped
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rng := rand.New(rand.NewPCG(cfg.seed, 0x50a4))
	r := &run{t: t, cfg: cfg, f: newFleet(rng), client: env.Client, remoteClient: remoteEnv.Client}
	r.mon = newMonitor(r)
	// The whole schedule is drawn before anything runs, so that a seed
	// replays it whatever the timing.
	var phases [][]*fault
	for left := cfg.duration; left > 0; left -= cfg.phase {
		phases = append(phases, schedule(rng, len(phases)+1, min(left, cfg.phase)))
	}

	r.phases = len(phases)
	began := time.Now()
	if err := r.setup(ctx, rng); err != nil {
		t.Fatal(err)
	}
	if err := r.mon.watch(ctx, local, env.Config); err != nil {
		t.Fatal(err)
	}
	if err := r.mon.watch(ctx, remote, remoteEnv.Config); err != nil {
		t.Fatal(err)
	}
	go r.mon.follow(ctx)
	if err := r.op.start(); err != nil {
		t.Fatal(err)
	}
	defer r.op.stop()
	r.start = time.Now()
	r.mon.converge(ctx, "initial sync", r.start, 2*time.Minute, false)
	r.mon.checkStuck(ctx, "initial sync", time.Minute)
	t.Logf("set up and synced in %v", time.Since(began).Round(100*time.Millisecond))

	if !t.Failed() {
		for i, faults := range phases {
			r.runPhase(ctx, faults)
			var last time.Time
			for _, f := range faults {
				if f.end.After(last) {
					last = f.end
				}
			}
			label := fmt.Sprintf("phase %d of %d", i+1, len(phases))
			t.Logf("%s: %d faults injected by %s", label, len(faults), r.since(last))
			r.mon.converge(ctx, label, last, cfg.converge, true)
			r.mon.checkStuck(ctx, label, cfg.converge)
			r.checkpoint(ctx, label)
		}
	}
	r.op.stop()
	if err := r.mon.scanAllEvents(ctx); err != nil {
		t.Errorf("scanning events: %v", err)
	}
	r.checkpoint(ctx, "end")

	table := r.report()
	t.Log("\n" + table)
	t.Log("\n" + r.timeline())
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	r.fail()
	if !t.Failed() {
		_ = os.Remove(r.op.logPath)
	} else {
		t.Logf("the operator's log: %s", r.op.logPath)
	}
}

// checkpoint runs the checks that need a quiet fleet.
func (r *run) checkpoint(ctx context.Context, label string) {
	if err := r.mon.checkForeign(ctx); err != nil {
		r.t.Errorf("%s: reading foreign objects: %v", label, err)
	}
	if err := r.mon.scanStatuses(ctx); err != nil {
		r.t.Errorf("%s: reading statuses: %v", label, err)
	}
	if err := r.mon.scanLog(); err != nil {
		r.t.Errorf("%s: reading the operator's log: %v", label, err)
	}
	r.mon.checkWrites()
}

// setup makes the namespaces, the sources, the foreign objects, the git
// repository and server, the ManifestSyncs and the operator (not started).
func (r *run) setup(ctx context.Context, rng *rand.Rand) error {
	// The namespaces written into allow the homes' ManifestSyncs (the
	// write gate); the homes are their own.
	allowHomes := map[string]string{allowFrom: strings.Join(homeNames(), ",")}
	ns := func(c client.Client, name string, labels map[string]string) error {
		var annotations map[string]string
		if !slices.Contains(homeNames(), name) && name != foreignNS {
			annotations = allowHomes
		}
		return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}})
	}
	names := homeNames()
	for i := range targetNSs {
		names = append(names, targetNS(i))
	}
	for _, name := range names {
		if err := ns(r.client, name, nil); err != nil {
			return err
		}
	}
	for i := range selectables {
		var labels map[string]string
		if g := r.f.nsGroups[selectNS(i)]; g != "" {
			labels = map[string]string{groupLabel: g}
		}
		if err := ns(r.client, selectNS(i), labels); err != nil {
			return err
		}
	}
	for _, c := range []client.Client{r.client, r.remoteClient} {
		if err := ns(c, foreignNS, map[string]string{groupLabel: foreignGroup}); err != nil {
			return err
		}
	}
	for i := range remoteNSs {
		if err := ns(r.remoteClient, remoteNS(i), nil); err != nil {
			return err
		}
	}

	kc, err := remoteEnv.Kubeconfig("soak-operator")
	if err != nil {
		return err
	}
	if err := r.kubeconfigSecrets(ctx, kc); err != nil {
		return err
	}
	if err := r.stuckSyncs(ctx, kc); err != nil {
		return err
	}
	if err := r.webhookSetup(ctx, rng); err != nil {
		return err
	}
	for _, s := range r.f.syncs {
		if s.kind != kindGit {
			if err := r.f.writeSource(ctx, r.client, s); err != nil {
				return err
			}
		}
	}
	if err := r.foreignObjects(ctx, rng); err != nil {
		return err
	}
	if r.git, err = newGitServer(r.t); err != nil {
		return err
	}
	if err := r.git.commit(r.f.gitFiles()); err != nil {
		return err
	}
	for _, s := range r.f.syncs {
		if err := r.client.Create(ctx, s.manifestSync(r.git.url())); err != nil {
			return fmt.Errorf("creating %s: %w", s, err)
		}
	}
	return r.newOperator(ctx)
}

// kubeconfigSecrets puts the remote cluster's kubeconfig in every home
// namespace, and its client key among the Secret values.
func (r *run) kubeconfigSecrets(ctx context.Context, kc []byte) error {
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return err
	}
	r.f.change(func() {
		for _, u := range cfg.AuthInfos {
			if lines := strings.Split(strings.TrimSpace(string(u.ClientKeyData)), "\n"); len(lines) > 2 {
				r.f.secrets[lines[len(lines)/2]] = true // a line of the PEM key
			}
			if u.Token != "" {
				r.f.secrets[u.Token] = true
			}
		}
	})
	for i := range homes {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: homeNS(i), Name: "remote"}, Data: map[string][]byte{"value": kc}}
		if err := r.client.Create(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// foreignObjects makes the objects the operator must never touch, and
// records their resourceVersions: in every target namespace of both
// clusters an unlabelled ConfigMap and Secret and a ConfigMap of another
// owner; in soak-foreign (whose group no selector picks) unowned objects
// with the names of every managed one.
func (r *run) foreignObjects(ctx context.Context, rng *rand.Rand) error {
	create := func(cluster string, obj client.Object) error {
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[foreignLabel] = "true"
		obj.SetLabels(labels)
		if err := r.clientOf(cluster).Create(ctx, obj); err != nil {
			return fmt.Errorf("creating a foreign object: %w", err)
		}
		k, _, _ := keyOf(cluster, obj)
		r.mon.foreign[k] = obj.GetResourceVersion()
		return nil
	}
	cm := func(ns, name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"foreign": "yes"}}
	}
	secret := func(ns, name string) *corev1.Secret {
		v := ""
		r.f.change(func() { v = r.f.newSecret(rng) })
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": []byte(v)}}
	}
	type place struct{ cluster, ns string }
	var places []place
	for i := range targetNSs {
		places = append(places, place{local, targetNS(i)})
	}
	for i := range selectables {
		places = append(places, place{local, selectNS(i)})
	}
	if r.remoteClient != nil {
		for i := range remoteNSs {
			places = append(places, place{remote, remoteNS(i)})
		}
	}
	for _, p := range places {
		for _, obj := range []client.Object{
			cm(p.ns, "foreign-cm", nil),
			secret(p.ns, "foreign-secret"),
			cm(p.ns, "other-owned", map[string]string{controller.OwnerLabel: "elsewhere.other"}),
		} {
			if err := create(p.cluster, obj); err != nil {
				return err
			}
		}
	}
	for _, s := range r.f.syncs {
		var objs []client.Object
		switch s.kind {
		case kindObject:
			objs = []client.Object{secret(foreignNS, "copy-"+s.name), cm(foreignNS, "cfg-"+s.name, nil)}
		case kindConfigMap:
			objs = []client.Object{cm(foreignNS, s.sourceName(), nil)}
		case kindGit:
			for i := range 3 {
				objs = append(objs, cm(foreignNS, fmt.Sprintf("%s-%d", s.name, i), nil))
			}
		case kindSelector:
			objs = []client.Object{secret(foreignNS, s.sourceName())}
		}
		clusters := []string{local}
		if r.remoteClient != nil && slices.ContainsFunc(s.targets, func(t target) bool { return t.cluster == remote }) {
			clusters = append(clusters, remote)
		}
		for _, cluster := range clusters {
			for _, obj := range objs {
				if err := create(cluster, obj.DeepCopyObject().(client.Object)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// newOperator prepares `engine operator` with a kubeconfig of this
// cluster that may do anything but list, watch or write Pods, its git
// cache in a directory of its own, its webhook receiver on a port of
// 127.0.0.1.
func (r *run) newOperator(ctx context.Context) error {
	dir := r.t.TempDir()
	admin, err := env.Kubeconfig("soak-operator-admin")
	if err != nil {
		return err
	}
	kc, err := r.restrictOperator(ctx, admin)
	if err != nil {
		return err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return err
	}
	logDir, err := os.MkdirTemp("", "soak-")
	if err != nil {
		return err
	}
	webhookAddr := testenv.FreeAddr(r.t)
	r.webhookURL = "http://" + webhookAddr
	r.op = &operatorProc{
		bin: engineBin, kubeconfig: kcPath, logPath: filepath.Join(logDir, "operator.log"),
		env:  []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CACHE_HOME=" + filepath.Join(dir, "cache")},
		args: []string{"--webhook-bind-address", webhookAddr},
	}
	return nil
}

// report is the table of the faults injected and the invariants held.
func (r *run) report() string {
	var b strings.Builder
	m := r.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	r.faultsMu.Lock()
	defer r.faultsMu.Unlock()
	r.op.mu.Lock()
	starts, selfExits := r.op.starts, len(r.op.selfExits)
	r.op.mu.Unlock()
	counts := map[syncKind]int{}
	for _, s := range r.f.syncs {
		counts[s.kind]++
	}
	fmt.Fprintf(&b, "Soak run: seed %d, faults for %v in %d phase(s), %d ManifestSyncs (%d object + Starlark, %d ConfigMap pass-through, %d git, %d selector), %d managed objects written, %d foreign objects; `engine operator` started %d times (%d exits of its own).\n\n",
		r.cfg.seed, r.cfg.duration, r.phases, len(r.f.syncs), counts[kindObject], counts[kindConfigMap], counts[kindGit], counts[kindSelector],
		len(m.writes), len(m.foreign), starts, selfExits)
	fmt.Fprintf(&b, "The operator may not list, watch or write %s (RBAC). Beside the fleet, %d ManifestSyncs can never sync; each must report why, the fleet converge as without them:\n", forbiddenKind, len(r.stuck))
	for _, s := range r.stuck {
		reason := s.reason
		if reason == "" {
			reason = "no reason reported"
		}
		fmt.Fprintf(&b, "- %s/%s: %s; reported %s\n", s.ns, s.name, s.why, reason)
	}
	r.mu.Lock()
	if r.floodPeak > 0 {
		fmt.Fprintf(&b, "\nThe operator's highest peak RSS (VmHWM) measured after a webhook flood: %d MiB.\n", r.floodPeak>>20)
	}
	r.mu.Unlock()
	b.WriteString("\n")
	b.WriteString("| fault | injected | skipped | time under fault |\n|---|---:|---:|---:|\n")
	for k := range numFaultKinds {
		var n, skipped int
		var under time.Duration
		for _, f := range r.faults {
			if f.kind != k {
				continue
			}
			if f.skipped != "" {
				skipped++
				continue
			}
			n++
			if f.dur > 0 && !f.end.IsZero() {
				under += f.end.Sub(f.start)
			}
		}
		dur := "-"
		if under > 0 {
			dur = under.Round(time.Second).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", k, n, skipped, dur)
	}
	broken := map[invariant]int{}
	for _, v := range m.violations {
		broken[v.inv]++
	}
	b.WriteString("\n| invariant | checks | result |\n|---|---:|---|\n")
	for inv := range numInvariants {
		result := "held"
		if n := broken[inv]; n > 0 {
			result = fmt.Sprintf("**broken** (%d)", n)
		}
		if inv == invConverge {
			result += fmt.Sprintf("; limit %v, slowest per phase %v", r.cfg.converge, rounded(m.slowest))
			if len(m.allTimes) > 0 {
				times := slices.Sorted(slices.Values(m.allTimes))
				result += fmt.Sprintf(", median %v", times[len(times)/2].Round(100*time.Millisecond))
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %s |\n", inv, m.checks[inv], result)
	}
	fmt.Fprintf(&b, "\nScanned for %d Secret values (raw and base64): %d operator log lines, %d events, %d ManifestSync statuses.\n",
		len(r.f.secrets), m.logLines, m.events, m.statuses)
	return b.String()
}

// timeline lists the faults that last (outages, kills, rejected source
// values) and the webhook floods, with their times into the run.
func (r *run) timeline() string {
	r.faultsMu.Lock()
	defer r.faultsMu.Unlock()
	var b strings.Builder
	b.WriteString("Faults that last, in the order they started:\n")
	skips := map[string]int{}
	for _, f := range r.faults {
		if f.skipped != "" {
			skips[f.kind.String()+": "+f.skipped]++
			continue
		}
		if f.dur > 0 || f.kind == faultWebhookFlood {
			fmt.Fprintf(&b, "  %7v – %7v  %s\n", r.since(f.start), r.since(f.end), f)
		}
	}
	b.WriteString("Faults skipped:\n")
	for _, why := range slices.Sorted(maps.Keys(skips)) {
		fmt.Fprintf(&b, "  %d× %s\n", skips[why], why)
	}
	return b.String()
}

func rounded(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond)
	}
	return out
}

// fail reports every broken invariant: which, what, and after which
// fault.
func (r *run) fail() {
	m := r.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	slices.SortStableFunc(m.violations, func(a, b violation) int { return int(a.inv - b.inv) })
	const most = 40
	for i, v := range m.violations {
		if i == most {
			r.t.Errorf("... and %d more broken invariants", len(m.violations)-most)
			break
		}
		r.t.Errorf("BROKEN %q: %s %s (at %s, %s)", v.inv, v.what, v.detail, r.since(v.at), v.after)
	}
}
