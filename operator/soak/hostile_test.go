package soak

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// The hostile inputs of issue 25: ManifestSyncs that can never sync
// (their output is a kind the operator may not list, or their peer
// accepts connections and never answers), peers blackholed for a while,
// and webhook floods. The faulty ManifestSyncs are not part of the fleet:
// they must report why they fail, and the fleet must converge as if they
// were not there.

// operatorUser is who the soak's operator is, by impersonation: RBAC
// grants it every resource of every API group but Pods.
const (
	operatorUser  = "soak-operator"
	operatorGroup = "soak:operators"
	// forbiddenKind is the kind the operator may not list, watch or write.
	forbiddenKind = "pods"
	// allowFrom is the write gate's annotation (controller's
	// AllowFromAnnotation): the target namespaces allow the homes.
	allowFrom = "manifestsync.dev/allow-from"
	// hookSecret is the webhook Secret of every home namespace; the git
	// syncs opt in with it.
	hookSecret = "hook"
)

// stuckSync is a ManifestSync that can never sync, and why.
type stuckSync struct {
	ns, name string
	why      string
	// reason is the failure it reported last.
	reason string
}

func (s *stuckSync) String() string {
	return fmt.Sprintf("ManifestSync %s/%s (%s)", s.ns, s.name, s.why)
}

// restrictOperator makes the operator's identity: the ClusterRole of
// every resource but Pods, bound to operatorUser, and a kubeconfig of
// the test's own credentials that impersonates it. It checks, as the API
// server sees it, that the user may list ConfigMaps and may not list
// Pods.
func (r *run) restrictOperator(ctx context.Context, admin []byte) ([]byte, error) {
	if err := r.operatorRBAC(ctx); err != nil {
		return nil, err
	}
	return impersonate(admin)
}

// operatorRBAC makes the ClusterRole of every resource but Pods, bound
// to operatorUser, and waits until the API server's authorizer knows it.
func (r *run) operatorRBAC(ctx context.Context) error {
	dc, err := discovery.NewDiscoveryClientForConfig(r.localEnv().Config)
	if err != nil {
		return err
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		return err
	}
	var named []string
	for _, g := range groups.Groups {
		if g.Name != "" {
			named = append(named, g.Name)
		}
	}
	core, err := dc.ServerResourcesForGroupVersion("v1")
	if err != nil {
		return err
	}
	var coreResources []string
	for _, res := range core.APIResources {
		if res.Name != forbiddenKind && !strings.HasPrefix(res.Name, forbiddenKind+"/") {
			coreResources = append(coreResources, res.Name)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: operatorUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: named, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: coreResources, Verbs: []string{"*"}},
			{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: operatorUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operatorUser},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := r.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating the operator's RBAC: %w", err)
		}
	}
	// The API server's authorizer learns of the binding from its own
	// watch: it is asked again until it has, for at most 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for resource, want := range map[string]bool{"configmaps": true, "secrets": true, forbiddenKind: false} {
		for {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: operatorUser, Groups: []string{operatorGroup, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: resource},
			}}
			if err := r.client.Create(ctx, sar); err != nil {
				return err
			}
			if sar.Status.Allowed == want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the soak's operator may list %s: %v, want %v (%s), 10 s after its RBAC was made", resource, sar.Status.Allowed, want, sar.Status.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// impersonate turns a kubeconfig of the test's own credentials into one
// that acts as operatorUser: the API server's audit log still names the
// credentials' user, so that each replica of a sharded run is told apart.
func impersonate(admin []byte) ([]byte, error) {
	cfg, err := clientcmd.Load(admin)
	if err != nil {
		return nil, err
	}
	for _, u := range cfg.AuthInfos {
		u.Impersonate, u.ImpersonateGroups = operatorUser, []string{operatorGroup}
	}
	return clientcmd.Write(*cfg)
}

// stuckSyncs makes the faulty ManifestSyncs, two of each: a transform
// that outputs a Pod into its own namespace; a git source on a port that
// never answers; a remote target whose kubeconfig names such a port.
func (r *run) stuckSyncs(ctx context.Context, remoteKubeconfig []byte) error {
	gitHole, clusterHole := gittest.Blackhole(r.t), gittest.Blackhole(r.t)
	cfg, err := clientcmd.Load(remoteKubeconfig)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", clusterHole)
	}
	holeKubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	for i := range 2 {
		home := homeNS(i)
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: fmt.Sprintf("src-stuck-%d", i)}, Data: map[string]string{"v": "1"}}
		if err := r.client.Create(ctx, src); err != nil {
			return err
		}
		if err := r.client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "blackhole"}, Data: map[string][]byte{"value": holeKubeconfig}}); err != nil {
			return err
		}
		objectSource := []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: src.Name}}}
		syncs := map[string]*v1alpha1.ManifestSync{
			"a kind the operator may not list": {Spec: v1alpha1.ManifestSyncSpec{
				Sources:   objectSource,
				Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: podTransform}},
				Targets:   []v1alpha1.Target{{Name: "own", Namespace: home}},
			}},
			"a git server that never answers": {Spec: v1alpha1.ManifestSyncSpec{
				Sources:  []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: fmt.Sprintf("git://127.0.0.1:%d/config.git", gitHole), Ref: v1alpha1.GitRef{Branch: "main"}}}},
				Targets:  []v1alpha1.Target{{Name: "own", Namespace: home}},
				Interval: &metav1.Duration{Duration: gitInterval},
			}},
			"a cluster that never answers": {Spec: v1alpha1.ManifestSyncSpec{
				Sources: objectSource,
				Targets: []v1alpha1.Target{{Name: "remote", Namespace: remoteNS(0),
					Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "blackhole", Key: "value"}}}},
			}},
		}
		for _, why := range slices.Sorted(func(yield func(string) bool) {
			for k := range syncs {
				if !yield(k) {
					return
				}
			}
		}) {
			ms := syncs[why]
			ms.Namespace = home
			ms.Name = fmt.Sprintf("stuck-%s-%d", strings.Fields(why)[1], i)
			if err := r.client.Create(ctx, ms); err != nil {
				return fmt.Errorf("creating %s/%s: %w", ms.Namespace, ms.Name, err)
			}
			r.stuck = append(r.stuck, &stuckSync{ns: ms.Namespace, name: ms.Name, why: why})
		}
	}
	return nil
}

// podTransform outputs a Pod, a kind the soak's operator may not list.
const podTransform = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stuck"},
             "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}]
`

// checkStuck waits until every faulty ManifestSync reports, for its
// current generation, that it is not Ready and why (a reason that is
// neither Synced nor Progressing, and a message), at most within; one
// that does not breaks invStuck.
func (m *monitor) checkStuck(ctx context.Context, label string, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		var missing []string
		for _, s := range m.r.stuck {
			if why := m.stuckReport(ctx, s); why != "" {
				missing = append(missing, fmt.Sprintf("%s: %s", s, why))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			m.count(invStuck, len(m.r.stuck))
			for _, what := range missing {
				m.violate(invStuck, time.Now(), what, label)
			}
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stuckReport is why s does not report its failure yet; "" when it does.
func (m *monitor) stuckReport(ctx context.Context, s *stuckSync) string {
	ms := &v1alpha1.ManifestSync{}
	if err := m.r.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name}, ms); err != nil {
		return err.Error()
	}
	c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return "no Ready condition"
	case c.ObservedGeneration != ms.Generation:
		return fmt.Sprintf("Ready is for generation %d of %d", c.ObservedGeneration, ms.Generation)
	case c.Status == metav1.ConditionTrue || c.Reason == v1alpha1.ReasonSynced:
		return "it is Ready: " + c.Message
	case c.Reason == "" || c.Reason == v1alpha1.ReasonProgressing || c.Message == "":
		return fmt.Sprintf("Ready is %s (%s) without a reason of failure: %s", c.Status, c.Reason, m.redact(c.Message))
	}
	m.mu.Lock()
	s.reason = c.Reason
	m.mu.Unlock()
	return ""
}

// holdPort listens on 127.0.0.1:port, a port a server has just left, and
// holds every connection without a byte of answer, until closed.
type holdPort struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func listenHold(port int) (*holdPort, error) {
	var l net.Listener
	var err error
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Since(start) > 10*time.Second {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("blackholing port %d: %w", port, err)
	}
	h := &holdPort{l: l, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	return h, nil
}

// close frees the port and drops the held connections; it returns how
// many it held.
func (h *holdPort) close() int {
	h.l.Close()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	return len(h.conns)
}

// blackholeRemote kills the remote cluster's API server and holds its
// port for f.dur, then starts it again.
func (r *run) blackholeRemote(f *fault) error {
	u, err := url.Parse(remoteEnv.Config.Host)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return err
	}
	if err := remoteEnv.KillAPIServer(); err != nil {
		return err
	}
	h, err := listenHold(port)
	if err == nil {
		time.Sleep(f.dur)
		f.note = fmt.Sprintf("%d connections held", h.close())
	}
	return errors.Join(err, remoteEnv.StartAPIServer())
}

// blackholeGit stops the git daemon and holds its port for f.dur, then
// starts it again.
func (r *run) blackholeGit(f *fault) error {
	r.git.stop()
	h, err := listenHold(r.git.port)
	if err == nil {
		time.Sleep(f.dur)
		f.note = fmt.Sprintf("%d connections held", h.close())
	}
	return errors.Join(err, r.git.start())
}

// webhookSetup gives every home namespace the webhook Secret (its token
// among the Secret values no output may show) and the operator its
// receiver's address.
func (r *run) webhookSetup(ctx context.Context, rng *rand.Rand) error {
	for i := range homes {
		var token string
		r.f.change(func() { token = r.f.newSecret(rng) })
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: homeNS(i), Name: hookSecret}, Data: map[string][]byte{webhook.SecretKey: []byte(token)}}
		if err := r.client.Create(ctx, s); err != nil {
			return err
		}
		r.hookTokens = append(r.hookTokens, token)
	}
	return nil
}

// webhookFlood floods the operator's receiver with unauthenticated
// posts aimed at a git sync, then sends that sync a signed push (retried
// while the operator or its API server is down), and notes the codes
// and the operator's peak RSS.
func (r *run) webhookFlood(ctx context.Context, f *fault, rng *rand.Rand) error {
	s := r.pickSync(rng, kindGit)
	hookURL := r.webhookURL + webhook.PathPrefix + s.ns + "/" + s.name
	codes, took := flood(r.t, hookURL)
	peak := ""
	if m, err := r.op.peakRSS(); err == nil {
		peak = fmt.Sprintf(", operator peak RSS %d MiB", m>>20)
		r.mu.Lock()
		r.floodPeak = max(r.floodPeak, m)
		r.mu.Unlock()
	}
	f.note = fmt.Sprintf("at %s: %v in %v%s", s, codes, took.Round(time.Millisecond), peak)
	if codes[http.StatusAccepted] > 0 {
		return fmt.Errorf("%d unauthenticated posts were accepted", codes[http.StatusAccepted])
	}
	token := r.hookTokens[slices.Index(homeNames(), s.ns)]
	payload := []byte(`{"ref":"refs/heads/main","after":"soak"}`)
	headers := map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hex.EncodeToString(webhook.Sign(payload, []byte(token)))}
	start := time.Now()
	var last string
	for time.Since(start) < 2*time.Minute && ctx.Err() == nil {
		code, err := postFrom("127.0.0.1", hookURL, bytes.NewReader(payload), int64(len(payload)), headers)
		if err == nil && code == http.StatusAccepted {
			f.note += fmt.Sprintf("; the signed push accepted after %v", time.Since(start).Round(time.Millisecond))
			return nil
		}
		last = fmt.Sprintf("status %d, %v", code, err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("a signed push to %s was not accepted within 2m: %s", s, last)
}

func homeNames() []string {
	var out []string
	for i := range homes {
		out = append(out, homeNS(i))
	}
	return out
}

// peakRSS is the running operator's VmHWM.
func (o *operatorProc) peakRSS() (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.running() {
		return 0, errors.New("not running")
	}
	m, err := readMemory(o.cmd.Process.Pid)
	return m.hwm, err
}
