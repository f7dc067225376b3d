package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/internal/browsertest"
	"github.com/manifestsync/manifestsync/operator/history"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/view"
	"github.com/manifestsync/manifestsync/operator/webhook"
	"github.com/manifestsync/manifestsync/ui"
)

// updateScreenshots (or UI_SCREENSHOTS=DIR) writes the README's
// screenshots: docs/images/ui-*.png (or DIR/ui-*.png).
var updateScreenshots = flag.Bool("update-screenshots", false, "write docs/images/ui-*.png from the test run")

// within bounds what the page does at once (a dialog opening).
const within = 2 * time.Second

// The UI's promises of speed (issue 27): a hand edit shows Drifted in the
// open page within 2 s, and a page shows any change of a ManifestSync
// within 1 s, without a reload. They are judged on a machine that is not
// overloaded; on one whose load is over 4 per CPU (make test-loaded)
// a loaded machine's speed is not the UI's, and only loadedLimit (still
// far under any resync or poll) is judged, the time logged.
const (
	driftWithin = 2 * time.Second
	liveWithin  = time.Second
	loadedLimit = 15 * time.Second
)

// promise is the bound to judge a promise of d by here.
func promise(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return d
	}
	var load float64
	if _, err := fmt.Sscanf(string(raw), "%f", &load); err != nil || load <= 4*float64(runtime.NumCPU()) {
		return d
	}
	t.Logf("load average %.1f on %d CPUs: the promise of %s is judged as %s", load, runtime.NumCPU(), d, loadedLimit)
	return loadedLimit
}

// uiServers are the two servers of the scene.
type uiServers struct {
	local, cluster string     // base URLs
	clusterLog     *serverLog // the cluster mode server's log
}

func TestUI(t *testing.T) {
	env.Need(t)
	sc := setUp(t)
	srv := startUI(t)
	b := browsertest.Start(t, browsertest.Options{})
	local := b.NewSession(t)

	// Each check fails on the console errors (a script error, a CSP
	// violation) its pages logged.
	run := func(name string, check func(t *testing.T)) {
		before := len(b.ConsoleErrors())
		t.Run(name, func(t *testing.T) {
			defer func() {
				if errs := b.ConsoleErrors()[before:]; len(errs) > 0 {
					t.Errorf("the pages logged errors (a script error or a CSP violation):\n%s", strings.Join(errs, "\n"))
				}
			}()
			check(t)
		})
	}
	run("Overview", func(t *testing.T) { testOverview(t, sc, srv, local) })
	run("Tree", func(t *testing.T) { testTree(t, srv, local) })
	run("DriftLive", func(t *testing.T) { testDrift(t, sc, srv, local) })
	run("Actions", func(t *testing.T) { testActions(t, sc, srv, local) })
	run("ChangeWhileLoading", func(t *testing.T) { testChangeWhileLoading(t, sc, srv, b) })
	run("ConfirmAcrossRefresh", func(t *testing.T) { testConfirmAcrossRefresh(t, sc, srv, b) })
	run("FocusAcrossRefresh", func(t *testing.T) { testFocusAcrossRefresh(t, sc, srv, b) })
	run("ClickAcrossRefresh", func(t *testing.T) { testClickAcrossRefresh(t, sc, srv, b) })
	run("NoScript", func(t *testing.T) { testNoScript(t, sc, srv, b) })
	run("Accessibility", func(t *testing.T) { testAccessibility(t, sc, srv, b) })
	run("Screenshots", func(t *testing.T) { testScreenshots(t, sc, srv, b) })
	run("RBAC", func(t *testing.T) { testRBAC(t, sc, srv, b) })
	run("NoSecrets", func(t *testing.T) { testNoSecrets(t, sc, srv, local, b) })
	run("CrossOrigin", func(t *testing.T) { testCrossOrigin(t, sc, srv, b) })
	run("HostCheck", func(t *testing.T) { testHostCheck(t, srv) })
	run("Headers", func(t *testing.T) { testHeaders(t, srv, b) })
}

// startUI serves the UI in both modes with the administrator's config:
// local as `engine ui` with a kubeconfig, cluster as the operator serves it.
func startUI(t *testing.T) *uiServers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan error
	t.Cleanup(func() {
		cancel()
		for _, d := range done {
			select {
			case <-d:
			case <-time.After(10 * time.Second):
				t.Errorf("a UI server's watches did not stop within 10s")
			}
		}
	})
	start := func(opts ui.Options) string {
		s, err := ui.New(opts)
		if err != nil {
			t.Fatalf("ui.New: %v", err)
		}
		d := make(chan error, 1)
		done = append(done, d)
		go func() { d <- s.Start(ctx) }()
		return serve(t, s)
	}
	log := &serverLog{}
	return &uiServers{
		local:      start(ui.Options{Mode: ui.ModeLocal, Config: env.Config, Evaluator: newEvaluator(t), Log: (&serverLog{}).logger()}),
		cluster:    start(ui.Options{Mode: ui.ModeCluster, Config: env.Config, Evaluator: newEvaluator(t), Log: log.logger()}),
		clusterLog: log,
	}
}

// msPath is the page of a ManifestSync.
func msPath(key client.ObjectKey) string { return "/ms/" + key.Namespace + "/" + key.Name }

// open navigates s to base+path and fails unless the status is want.
func open(t *testing.T, s *browsertest.Session, base, path string, want int64) {
	t.Helper()
	status, err := s.Navigate(base + path)
	if err != nil {
		t.Fatal(err)
	}
	if status != want {
		t.Fatalf("GET %s: status %d, want %d", path, status, want)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, s *browsertest.Session, expr string) T {
	t.Helper()
	v, err := browsertest.Eval[T](s, expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitJS waits until the expression is true in the page, at most d.
func waitJS(t *testing.T, s *browsertest.Session, expr string, d time.Duration) {
	t.Helper()
	if err := s.WaitJS(expr, d); err != nil {
		html, _ := browsertest.Eval[string](s, `document.getElementById("main") ? document.getElementById("main").innerText.slice(0, 3000) : document.body.innerText.slice(0, 3000)`)
		t.Fatalf("waiting %s for %s: %v\npage text:\n%s", d, expr, err, html)
	}
}

// q is a JavaScript string literal of s.
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// attr is the attribute of the first element matching sel, or "" when
// none does.
func attr(t *testing.T, s *browsertest.Session, sel, name string) string {
	t.Helper()
	return eval[string](t, s, fmt.Sprintf(`(function(){var e=document.querySelector(%s);return e?(e.getAttribute(%s)||""):"<none>"})()`, q(sel), q(name)))
}

func testOverview(t *testing.T, sc *scene, srv *uiServers, s *browsertest.Session) {
	open(t, s, srv.local, "/", 200)
	for _, key := range sc.syncs {
		waitJS(t, s, fmt.Sprintf(`!!document.querySelector('table#syncs tr[data-ms=%s]')`, q(key.String())), 10*time.Second)
	}
	// Every row's states are those of the API's ManifestSyncs.
	for _, key := range sc.syncs {
		ms := getSync(t, key)
		sel := fmt.Sprintf(`table#syncs tr[data-ms=%s]`, q(key.String()))
		ready := "Unknown"
		for _, c := range ms.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				ready = string(c.Status)
			}
		}
		if got := attr(t, s, sel, "data-ready"); got != ready {
			t.Errorf("%s: data-ready=%q, the API says Ready %s", key, got, ready)
		}
		healthy := apimeta.IsStatusConditionTrue(ms.Status.Conditions, v1alpha1.ConditionHealthy)
		if got := attr(t, s, sel, "data-health"); (got == "Healthy") != healthy {
			t.Errorf("%s: data-health=%q, the API's Healthy condition is true: %v", key, got, healthy)
		}
		if got, want := attr(t, s, sel, "data-suspended"), fmt.Sprint(ms.Spec.Suspend); got != want {
			t.Errorf("%s: data-suspended=%q, want %s", key, got, want)
		}
		if got := attr(t, s, sel, "data-drifted"); got != "false" {
			t.Errorf("%s: data-drifted=%q before any drift", key, got)
		}
		if !eval[bool](t, s, fmt.Sprintf(`(function(){var a=document.querySelector(%s);return !!a && a.textContent.trim()===%s})()`, q(sel+` a[href="`+msPath(key)+`"]`), q(key.Name))) {
			t.Errorf("%s: no link named %s to %s in its row", key, key.Name, msPath(key))
		}
		if rev := ms.Status.LastAppliedRevision; rev != "" {
			if got := attr(t, s, sel+` code`, "title"); got != rev {
				t.Errorf("%s: the revision's title is %q, want the full %q", key, got, rev)
			}
		}
	}
	counts := eval[map[string]string](t, s, `Object.fromEntries([...document.querySelectorAll('#counts [data-count]')].map(e => [e.dataset.count, e.textContent.trim()]))`)
	if counts["total"] != fmt.Sprint(len(sc.syncs)) || counts["ready"] != fmt.Sprint(len(sc.syncs)) {
		t.Errorf("counts %v, want %d total, all ready", counts, len(sc.syncs))
	}
	// The overview follows a change live, without a reload: team-b's
	// ManifestSync suspended (and resumed) by someone else.
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)
	eval[bool](t, s, `(window.__notReloaded = true)`)
	row := fmt.Sprintf(`document.querySelector('tr[data-ms=%s]')`, q(sc.other.String()))
	for _, suspend := range []bool{true, false} {
		start := time.Now()
		setSuspend(t, sc.other, suspend)
		limit := promise(t, liveWithin)
		if err := s.WaitJS(fmt.Sprintf(`%s.dataset.suspended === "%v"`, row, suspend), limit); err != nil {
			t.Errorf("the overview did not show %s suspended=%v within %s: %v", sc.other, suspend, limit, err)
		} else {
			t.Logf("the overview showed suspended=%v %s after the change", suspend, time.Since(start).Round(10*time.Millisecond))
		}
	}
	if !eval[bool](t, s, `window.__notReloaded === true`) {
		t.Errorf("the overview was reloaded to show a change")
	}
	if n := eval[string](t, s, `document.querySelector('#counts [data-count="suspended"]').textContent.trim()`); n != "0" {
		t.Errorf("%s suspended after the resume", n)
	}

	// The namespace filter.
	open(t, s, srv.local, "/?ns="+teamA, 200)
	rows := eval[[]string](t, s, `[...document.querySelectorAll('table#syncs tr[data-ms]')].map(e => e.dataset.ms)`)
	if len(rows) != 1 || rows[0] != sc.app.String() {
		t.Errorf("?ns=%s lists %v, want only %s", teamA, rows, sc.app)
	}
}

func testTree(t *testing.T, srv *uiServers, s *browsertest.Session) {
	// starlark-app's dev target: a Deployment of one replica, rolled out
	// by kube-controller-manager onto kwok's nodes.
	ns := "starlark-app-web-dev"
	open(t, s, srv.local, "/ms/platform/starlark-app", 200)
	dep := fmt.Sprintf(`section.target[data-target="dev"] div.wave li.node[data-object=%s]`, q("Deployment "+ns+"/web"))
	// The page follows the rollout live; give kwok time to run the Pod.
	waitJS(t, s, fmt.Sprintf(`(function(){
		var d = document.querySelector(%s); if (!d) return false;
		var rs = d.querySelector(':scope > ul > li.node[data-object^="ReplicaSet "]'); if (!rs) return false;
		var pod = rs.querySelector(':scope > ul > li.node[data-object^="Pod "]'); if (!pod) return false;
		return d.dataset.health === "Current" && rs.dataset.health === "Current" && pod.dataset.health === "Current";
	})()`, q(dep)), timeout)
	if got := attr(t, s, dep, "data-state"); got != "Synced" {
		t.Errorf("the Deployment's data-state=%q, want Synced", got)
	}
	if got := attr(t, s, dep, "data-managed"); got != "true" {
		t.Errorf("the Deployment's data-managed=%q, want true", got)
	}
	if got := attr(t, s, dep+` > ul > li.node`, "data-managed"); got != "false" {
		t.Errorf("the ReplicaSet's data-managed=%q, want false", got)
	}
	if n := eval[int](t, s, `document.querySelectorAll('#inputs').length`); n != 1 {
		t.Errorf("%d #inputs", n)
	}
	if n := eval[int](t, s, `document.querySelectorAll('#conditions tr[data-condition="Ready"][data-status="True"]').length`); n != 1 {
		t.Errorf("#conditions has no Ready True row")
	}
	if n := eval[int](t, s, `document.querySelectorAll('li.node > details.yaml pre').length`); n == 0 {
		t.Errorf("no live YAML")
	}
}

// click clicks the element sel selects (by CSS) with the mouse.
func click(t *testing.T, s *browsertest.Session, sel string) {
	t.Helper()
	var err error
	for range 3 {
		// A live refresh may replace the element between its lookup and
		// the click: look it up again.
		if err = s.Do(chromedp.Click(chromedp.CSS(sel))); err == nil || !strings.Contains(err.Error(), "node") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("clicking %s: %v", sel, err)
	}
}

// confirmAction clicks the action's button, checks that dialog#confirm
// asks, confirms with #confirm-ok and waits for the page the POST answers
// with its #flash.
func confirmAction(t *testing.T, s *browsertest.Session, button string) {
	t.Helper()
	eval[bool](t, s, `(window.__beforeAction = true)`)
	click(t, s, button)
	waitJS(t, s, `document.getElementById("confirm").open`, within)
	click(t, s, "#confirm-ok")
	waitAnswer(t, s)
}

// waitAnswer waits for the page that answers an action's POST: a new
// document (the marker confirmAction set is gone) with a #flash.
func waitAnswer(t *testing.T, s *browsertest.Session) {
	t.Helper()
	waitJS(t, s, `window.__beforeAction === undefined && document.readyState === "complete" && !!document.getElementById("flash")`, 15*time.Second)
}

// flash is the #flash element's role and text.
func flash(t *testing.T, s *browsertest.Session) (role, text string) {
	t.Helper()
	v := eval[[]string](t, s, `(function(){var f=document.getElementById("flash");return f?[f.getAttribute("role")||"",f.textContent.trim()]:["",""]})()`)
	return v[0], v[1]
}

func testDrift(t *testing.T, sc *scene, srv *uiServers, s *browsertest.Session) {
	open(t, s, srv.local, msPath(sc.app), 200)
	cm := `li.node[data-object="ConfigMap team-a/app-config"]`
	waitJS(t, s, `(function(){var e=document.querySelector('`+cm+`');return !!e && e.dataset.state==="Synced"})()`, 10*time.Second)
	// The page listens to the stream before the edit.
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)
	eval[bool](t, s, `(window.__notReloaded = true)`)
	patch := []byte(`{"data":{"greeting":"edited by hand"}}`)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "app-config"}}
	start := time.Now()
	if err := env.Client.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	drifted := `(function(){var e=document.querySelector('` + cm + `');return !!e && e.dataset.state==="Drifted"})()`
	limit := promise(t, driftWithin)
	if err := s.WaitJS(drifted, limit); err != nil {
		// Say how late it was, then fail.
		late := s.WaitJS(drifted, timeout)
		t.Errorf("the open page did not show the ConfigMap Drifted within %s of the edit (after %s: %v)", limit, time.Since(start).Round(10*time.Millisecond), late)
	} else {
		t.Logf("the page showed Drifted %s after the edit", time.Since(start).Round(10*time.Millisecond))
	}
	if !eval[bool](t, s, `window.__notReloaded === true`) {
		t.Errorf("the page was reloaded to show the drift")
	}
	// The overview and the diff say so too.
	open(t, s, srv.local, "/", 200)
	waitJS(t, s, fmt.Sprintf(`document.querySelector('tr[data-ms=%s]').dataset.drifted === "true"`, q(sc.app.String())), 10*time.Second)
	if n := eval[string](t, s, `document.querySelector('#counts [data-count="drifted"]').textContent.trim()`); n != "1" {
		t.Errorf("#counts says %s drifted, want 1", n)
	}
	for query, want := range map[string]string{"/?state=drifted": sc.app.String(), "/?q=starlark": "platform/starlark-app"} {
		open(t, s, srv.local, query, 200)
		if rows := eval[[]string](t, s, `[...document.querySelectorAll('table#syncs tr[data-ms]')].map(e => e.dataset.ms)`); len(rows) != 1 || rows[0] != want {
			t.Errorf("%s lists %v, want only %s", query, rows, want)
		}
	}
	open(t, s, srv.local, msPath(sc.app)+"/diff", 200)
	d := `div.diff[data-object="ConfigMap team-a/app-config"]`
	waitJS(t, s, `!!document.querySelector('`+d+`')`, 30*time.Second)
	if got := attr(t, s, d, "data-action"); got != "Configured" {
		t.Errorf("the diff's action for the drifted ConfigMap is %q, want Configured", got)
	}
	if text := eval[string](t, s, `document.querySelector('`+d+` pre').textContent`); !strings.Contains(text, "edited by hand") || !strings.Contains(text, "hello") {
		t.Errorf("the diff does not show live vs desired:\n%s", text)
	}
}

func testActions(t *testing.T, sc *scene, srv *uiServers, s *browsertest.Session) {
	ctx := context.Background()
	page := msPath(sc.app)
	open(t, s, srv.local, page, 200)
	// A failure half-way must not leave the ManifestSync suspended for the
	// checks after this one.
	t.Cleanup(func() {
		if getSync(t, sc.app).Spec.Suspend {
			setSuspend(t, sc.app, false)
		}
	})

	// Sync now, by keyboard alone: the button focused, Enter asks, Tab
	// reaches Confirm, Enter confirms.
	before := getSync(t, sc.app).Annotations[webhook.RequestedAtAnnotation]
	// The page names whose rights it uses: the kubeconfig's user.
	user := eval[string](t, s, `(document.querySelector("header .user") || {textContent: ""}).textContent.trim()`)
	if user == "" {
		t.Errorf("the page does not say as whom it acts")
		user = "?"
	}
	eval[bool](t, s, `(window.__beforeAction = true)`)
	eval[bool](t, s, `(document.querySelector('button[data-action="sync"]').focus(), document.activeElement.dataset.action === "sync")`)
	if err := s.Do(chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, s, `document.getElementById("confirm").open`, within)
	if !eval[bool](t, s, `document.getElementById("confirm").contains(document.activeElement)`) {
		t.Errorf("the confirmation dialog does not take the focus")
	}
	for i := 0; i < 4 && eval[string](t, s, `document.activeElement.id`) != "confirm-ok"; i++ {
		if err := s.Do(chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
	}
	if id := eval[string](t, s, `document.activeElement.id`); id != "confirm-ok" {
		t.Fatalf("Tab did not reach #confirm-ok (focus on %q)", id)
	}
	if err := s.Do(chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, s)
	if role, text := flash(t, s); role != "status" {
		t.Errorf("sync now: #flash role=%q %q, want status", role, text)
	}
	after := getSync(t, sc.app).Annotations[webhook.RequestedAtAnnotation]
	if after == "" || after == before {
		t.Errorf("sync now: %s is %q (was %q)", webhook.RequestedAtAnnotation, after, before)
	}
	waitEvent(t, sc.app, user, "UISync")

	// Suspend, then resume.
	confirmAction(t, s, `button[data-action="suspend"]`)
	if role, text := flash(t, s); role != "status" {
		t.Errorf("suspend: #flash role=%q %q", role, text)
	}
	if !getSync(t, sc.app).Spec.Suspend {
		t.Errorf("suspend: spec.suspend is false")
	}
	waitEvent(t, sc.app, user, "UISuspend")
	waitJS(t, s, `!!document.querySelector('button[data-action="resume"]')`, 10*time.Second)
	confirmAction(t, s, `button[data-action="resume"]`)
	if getSync(t, sc.app).Spec.Suspend {
		t.Errorf("resume: spec.suspend is still true")
	}
	waitEvent(t, sc.app, user, "UIResume")

	// Cancelling asks and does nothing.
	rv := getSync(t, sc.app).ResourceVersion
	click(t, s, `button[data-action="suspend"]`)
	waitJS(t, s, `document.getElementById("confirm").open`, within)
	click(t, s, "#confirm-cancel")
	waitJS(t, s, `!document.getElementById("confirm").open`, within)
	time.Sleep(300 * time.Millisecond)
	if ms := getSync(t, sc.app); ms.Spec.Suspend {
		t.Errorf("a cancelled suspend suspended (resourceVersion %s -> %s)", rv, ms.ResourceVersion)
	}

	// Rollback to the entry of the first commit.
	ms := getSync(t, sc.app)
	entry := -1
	for i, h := range ms.Status.History {
		if h.Inputs != nil && strings.Contains(h.Inputs.Sources["repo"], sc.commits[0]) {
			entry = i
		}
	}
	if entry < 0 {
		t.Fatalf("no history entry of commit %s: %+v", sc.commits[0], ms.Status.History)
	}
	// The files changed between the two commits' entries.
	newest := slices.IndexFunc(ms.Status.History, func(h v1alpha1.HistoryEntry) bool {
		return h.Inputs != nil && strings.Contains(h.Inputs.Sources["repo"], sc.commits[1])
	})
	if newest >= 0 {
		open(t, s, srv.local, fmt.Sprintf("%s/history?from=%d&to=%d", page, entry, newest), 200)
		files := eval[[]string](t, s, `[...document.querySelectorAll('ul#changes li[data-source="repo"] li[data-change]')].map(e => e.dataset.change + " " + e.querySelector("code").textContent)`)
		if len(files) != 1 || files[0] != "Modified app.yaml" {
			t.Errorf("files changed from entry %d to %d: %v, want [Modified app.yaml]", entry, newest, files)
		}
	} else {
		t.Errorf("no history entry of commit %s", sc.commits[1])
	}
	open(t, s, srv.local, page+"/history", 200)
	if n := eval[int](t, s, `document.querySelectorAll('table#history tr[data-entry]').length`); n != len(ms.Status.History) {
		t.Errorf("the history lists %d entries, the API %d", n, len(ms.Status.History))
	}
	confirmAction(t, s, fmt.Sprintf(`button[data-action="rollback"][data-entry="%d"]`, entry))
	if role, text := flash(t, s); role != "status" {
		t.Errorf("rollback: #flash role=%q %q", role, text)
	}
	ms = getSync(t, sc.app)
	if got := ms.Spec.Sources[0].Git.Ref; got.Commit != sc.commits[0] {
		t.Errorf("rollback: the source's ref is %+v, want commit %s", got, sc.commits[0])
	}
	if ms.Annotations[history.Annotation] == "" {
		t.Errorf("rollback: no %s annotation", history.Annotation)
	}
	waitEvent(t, sc.app, user, "UIRollback")
	testenv.Eventually(t, timeout, func() error {
		ms := getSync(t, sc.app)
		if err := readyErr(ms); err != nil {
			return err
		}
		if !strings.Contains(ms.Status.LastAppliedRevision+fmt.Sprint(ms.Status.History[0].Inputs), sc.commits[0]) {
			return fmt.Errorf("the applied revision is %s, not of commit %s", ms.Status.LastAppliedRevision, sc.commits[0])
		}
		return nil
	})

	// Undo: the branch again.
	open(t, s, srv.local, page, 200)
	waitJS(t, s, `!!document.querySelector('button[data-action="undo"]')`, 10*time.Second)
	confirmAction(t, s, `button[data-action="undo"]`)
	ms = getSync(t, sc.app)
	if got := ms.Spec.Sources[0].Git.Ref; got.Branch != "main" || got.Commit != "" {
		t.Errorf("undo: the source's ref is %+v, want branch main", got)
	}
	if _, ok := ms.Annotations[history.Annotation]; ok {
		t.Errorf("undo: the %s annotation stays", history.Annotation)
	}
	waitEvent(t, sc.app, user, "UIUndo")
	waitReady(t, sc.app)

	// The events tab lists them, newest first.
	open(t, s, srv.local, page+"/events", 200)
	reasons := eval[[]string](t, s, `[...document.querySelectorAll('table#events tr[data-reason]')].map(e => e.dataset.reason)`)
	at := func(r string) int { return slices.Index(reasons, r) }
	for _, r := range []string{"UISync", "UISuspend", "UIResume", "UIRollback", "UIUndo"} {
		if at(r) < 0 {
			t.Errorf("the events tab has no %s event: %v", r, reasons)
		}
	}
	if at("UIUndo") > at("UISync") {
		t.Errorf("the events tab is not newest first: %v", reasons)
	}
	_ = ctx
}

// setSuspend sets spec.suspend of key as kubectl patch would.
func setSuspend(t *testing.T, key client.ObjectKey, suspend bool) {
	t.Helper()
	obj := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := fmt.Appendf(nil, `{"spec":{"suspend":%v}}`, suspend)
	if err := env.Client.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("suspend=%v %s: %v", suspend, key, err)
	}
}

// waitEvent waits for a core/v1 Event on the ManifestSync with the reason
// whose message names the user who acted.
func waitEvent(t *testing.T, key client.ObjectKey, user, reason string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		var list corev1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(key.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.InvolvedObject.Name == key.Name && e.InvolvedObject.Kind == "ManifestSync" {
				if !strings.Contains(e.Message, user) {
					return fmt.Errorf("event %s: %q does not name the user %q", reason, e.Message, user)
				}
				return nil
			}
		}
		return fmt.Errorf("no event %s on %s", reason, key)
	})
}

// unnamedControls lists the controls of the page without an accessible
// name (aria-label, aria-labelledby, a label, their text, a title).
const unnamedControls = `(function(){
  var bad = [];
  document.querySelectorAll('input:not([type=hidden]), select, textarea, button').forEach(function (e) {
    var name = (e.getAttribute('aria-label') || '').trim();
    if (!name && e.getAttribute('aria-labelledby')) {
      name = e.getAttribute('aria-labelledby').split(/\s+/).map(function (id) { var l = document.getElementById(id); return l ? l.textContent : ''; }).join(' ').trim();
    }
    if (!name && e.labels && e.labels.length) name = Array.prototype.map.call(e.labels, function (l) { return l.textContent; }).join(' ').trim();
    if (!name && e.tagName === 'BUTTON') name = e.textContent.trim();
    if (!name && (e.type === 'submit' || e.type === 'button')) name = (e.value || '').trim();
    if (!name) name = (e.getAttribute('title') || '').trim();
    if (!name) bad.push(e.outerHTML.slice(0, 160));
  });
  return bad;
})()`

// lowContrast lists the visible text of the page whose colour has less
// contrast with the background behind it than WCAG AA asks (4.5:1; 3:1
// for text of 24 px, or 18.7 px bold), at most 10.
const lowContrast = `(function(){
  function rgba(s) { var m = s.match(/[\d.]+/g) || [0,0,0,0]; return [+m[0], +m[1], +m[2], m.length > 3 ? +m[3] : 1]; }
  function lum(c) { var a = c.slice(0,3).map(function (v) { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126*a[0] + 0.7152*a[1] + 0.0722*a[2]; }
  function blend(top, bottom) { var a = top[3]; return [top[0]*a + bottom[0]*(1-a), top[1]*a + bottom[1]*(1-a), top[2]*a + bottom[2]*(1-a), 1]; }
  function background(e) {
    var layers = [];
    for (; e; e = e.parentElement) { var c = rgba(getComputedStyle(e).backgroundColor); if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    var bg = [255,255,255,1];
    if (layers.length && layers[layers.length-1][3] >= 1) bg = layers.pop();
    while (layers.length) bg = blend(layers.pop(), bg);
    return bg;
  }
  var bad = [];
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (var n; (n = walker.nextNode()) && bad.length < 10;) {
    if (!n.nodeValue.trim()) continue;
    var e = n.parentElement, st = getComputedStyle(e);
    if (st.visibility === "hidden" || st.display === "none" || e.closest("dialog:not([open]), details:not([open]) > :not(summary), .sr-only, [hidden]")) continue;
    var r = e.getBoundingClientRect(); if (r.width === 0 || r.height === 0) continue;
    var fg = rgba(st.color), bg = background(e);
    if (fg[3] < 1) fg = blend(fg, bg);
    var l1 = lum(fg), l2 = lum(bg), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    var size = parseFloat(st.fontSize), bold = parseInt(st.fontWeight, 10) >= 700;
    var need = (size >= 24 || (bold && size >= 18.66)) ? 3 : 4.5;
    if (ratio < need) bad.push(ratio.toFixed(2) + " < " + need + ": " + JSON.stringify(n.nodeValue.trim().slice(0, 40)) + " in " + e.tagName.toLowerCase() + (e.className ? "." + e.className : "") + " (" + st.color + " on rgb(" + bg.slice(0,3).join(", ") + "))");
  }
  return bad;
})()`

func testAccessibility(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	pages := []string{"/", msPath(sc.app), msPath(sc.app) + "/diff", msPath(sc.app) + "/history", msPath(sc.app) + "/events", "/ms/platform/starlark-app"}
	s := b.NewSession(t)
	for _, p := range pages {
		open(t, s, srv.local, p, 200)
		if bad := eval[[]string](t, s, unnamedControls); len(bad) > 0 {
			t.Errorf("%s: controls without an accessible name:\n%s", p, strings.Join(bad, "\n"))
		}
		if !eval[bool](t, s, `document.documentElement.lang !== "" && document.title !== ""`) {
			t.Errorf("%s: no lang or no title", p)
		}
	}
	// By keyboard: the first Tab reaches the skip link, and every
	// control Tab reaches shows where the focus is.
	open(t, s, srv.local, "/", 200)
	for i := 0; i < 12; i++ {
		if err := s.Do(chromedp.KeyEvent(kb.Tab)); err != nil {
			t.Fatal(err)
		}
		focus := eval[[]string](t, s, `(function(){var e=document.activeElement, st=getComputedStyle(e);
			return [e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " " + (e.textContent || e.value || "").trim().slice(0, 30),
				String((st.outlineStyle !== "none" && parseFloat(st.outlineWidth) > 0) || st.boxShadow !== "none")]})()`)
		if i == 0 && !strings.Contains(focus[0], "Skip to content") {
			t.Errorf("the first Tab reaches %q, not the skip link", focus[0])
		}
		if focus[1] != "true" {
			t.Errorf("the keyboard focus on %q is not shown (no outline nor shadow)", focus[0])
		}
	}
	// Contrast (WCAG AA: 4.5:1, 3:1 for large text) of the text of the
	// main pages, light and dark.
	for _, scheme := range []string{"light", "dark"} {
		c := b.NewSession(t)
		if err := c.Emulate(1280, 800, scheme); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/", msPath(sc.app), msPath(sc.app) + "/history", msPath(sc.app) + "/diff"} {
			open(t, c, srv.local, p, 200)
			if low := eval[[]string](t, c, lowContrast); len(low) > 0 {
				t.Errorf("%s (%s): text below the WCAG AA contrast:\n%s", p, scheme, strings.Join(low, "\n"))
			}
		}
	}
	// The login page too.
	open(t, s, srv.cluster, "/login", 200)
	if bad := eval[[]string](t, s, unnamedControls); len(bad) > 0 {
		t.Errorf("/login: controls without an accessible name:\n%s", strings.Join(bad, "\n"))
	}
	// A phone's width: nothing overflows sideways.
	phone := b.NewSession(t)
	if err := phone.Emulate(390, 844, "light"); err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		open(t, phone, srv.local, p, 200)
		w := eval[[]int](t, phone, `[document.scrollingElement.scrollWidth, innerWidth]`)
		if w[1] != 390 {
			t.Errorf("%s: innerWidth %d at a 390 px viewport (meta viewport?)", p, w[1])
		}
		if w[0] > w[1] {
			wide := eval[[]string](t, phone, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1).slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className)`)
			t.Errorf("%s: at 390 px the page is %d px wide (overflows: %v)", p, w[0], wide)
		}
	}
}

// screenshotDir is where the screenshots go, or "" when none are wanted.
func screenshotDir(t *testing.T) string {
	if dir := os.Getenv("UI_SCREENSHOTS"); dir != "" {
		return dir
	}
	if !*updateScreenshots {
		return ""
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "docs", "images")
}

func testScreenshots(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	dir := screenshotDir(t)
	if dir == "" {
		t.Skip("no -update-screenshots nor UI_SCREENSHOTS=DIR")
	}
	// A hand edit for the diff to show (team-a's drift is reported, not
	// corrected).
	patch := []byte(`{"data":{"greeting":"hello from kubectl edit"}}`)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "app-config"}}
	if err := env.Client.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	shots := []struct {
		file, path    string
		width, height int64
		dark          bool
		ready         string // a JS condition to wait for
		scroll        string // an element to scroll to the top, or ""
	}{
		{"ui-overview.png", "/", 1280, 800, false, `!!document.querySelector('table#syncs tr[data-ms]')`, ""},
		{"ui-overview-dark.png", "/", 1280, 800, true, `!!document.querySelector('table#syncs tr[data-ms]')`, ""},
		{"ui-tree.png", msPath(sc.app), 1280, 800, false,
			`document.querySelectorAll('li.node[data-object^="Deployment "] li.node[data-object^="Pod "][data-health="Current"]').length === 2 && !!document.querySelector('li.node[data-state="Drifted"]')`, `section.target`},
		{"ui-diff.png", msPath(sc.app) + "/diff", 1280, 800, false, `!!document.querySelector('div.diff[data-action="Configured"]')`, ""},
		{"ui-history.png", msPath(sc.app) + "/history?from=1&to=0", 1280, 800, false, `!!document.querySelector('table#history tr[data-entry]')`, ""},
		{"ui-phone.png", "/", 390, 844, false, `!!document.querySelector('table#syncs tr[data-ms]')`, ""},
	}
	for _, sh := range shots {
		s := b.NewSession(t)
		scheme := "light"
		if sh.dark {
			scheme = "dark"
		}
		if err := s.Emulate(sh.width, sh.height, scheme); err != nil {
			t.Fatal(err)
		}
		open(t, s, srv.local, sh.path, 200)
		waitJS(t, s, sh.ready, 30*time.Second)
		if sh.scroll != "" {
			eval[bool](t, s, fmt.Sprintf(`(document.querySelector(%s).scrollIntoView(), true)`, q(sh.scroll)))
		}
		path := filepath.Join(dir, sh.file)
		if err := s.Screenshot(path, sh.width, sh.height, sh.dark); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d KiB", path, fi.Size()>>10)
		if fi.Size() > 300<<10 {
			t.Errorf("%s is %d KiB, more than 300", path, fi.Size()>>10)
		}
	}
}

// reader makes a ServiceAccount of team-a that may read everything in
// team-a and nothing else (patch nothing), and returns a token of it from
// the TokenRequest API.
func reader(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "reader"}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "read-all"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "reader-read-all"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-all"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: teamA, Name: "reader"}},
		},
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(teamA).CreateToken(ctx, "reader",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	// Wait until the authorizer sees the binding.
	testenv.Eventually(t, 10*time.Second, func() error {
		ms := &v1alpha1.ManifestSyncList{}
		cfg := *env.Config
		cfg.Impersonate.UserName = "system:serviceaccount:" + teamA + ":reader"
		c, err := client.New(&cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			return err
		}
		return c.List(ctx, ms, client.InNamespace(teamA))
	})
	return tr.Status.Token
}

// onLogin fails unless s shows the login page (and nothing else).
func onLogin(t *testing.T, s *browsertest.Session, what string) {
	t.Helper()
	// The address changes as the page starts to load: wait for its parse.
	waitJS(t, s, `location.pathname === "/login" && document.readyState !== "loading"`, 5*time.Second)
	if !eval[bool](t, s, `!!document.querySelector('input#token[name="token"][type="password"]') && !!document.querySelector('button[type="submit"]')`) {
		t.Errorf("%s: the login page has no input#token[type=password] and submit button", what)
	}
	if eval[bool](t, s, `!!document.querySelector('table#syncs, li.node, tr[data-ms]')`) {
		t.Errorf("%s: the login page shows ManifestSyncs", what)
	}
}

// pasteToken pastes token into the login page's field and submits it, as
// a user pastes a token (one insertion: typed key by key, a token of a
// thousand characters took over 30 s at load 30).
func pasteToken(token string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Focus(chromedp.ID("token")),
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: token})
			return chromedp.Void{}, err
		},
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
	}
}

func testRBAC(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	token := reader(t)

	// No token: only the login page.
	anon := b.NewSession(t)
	for _, p := range []string{"/", msPath(sc.app), msPath(sc.app) + "/history"} {
		if _, err := anon.Navigate(srv.cluster + p); err != nil {
			t.Fatal(err)
		}
		onLogin(t, anon, "no token, "+p)
	}
	// Without a session the stream and the actions answer 401.
	for _, call := range []string{`fetch("/stream").then(r => r.status)`, fmt.Sprintf(`fetch(%s, {method: "POST", body: new URLSearchParams({confirm: "yes"})}).then(r => r.status)`, q(msPath(sc.app)+"/actions/suspend"))} {
		if st, err := browsertest.Run(anon, chromedp.Evaluate[int](call, chromedp.EvalAwaitPromise)); err != nil || st != 401 {
			t.Errorf("%s without a token: %d (%v), want 401", call, st, err)
		}
	}
	// A bad token: the login page again, and still only it.
	bad := "bad-token-0c7e1f2a9d"
	if err := anon.Do(pasteToken(bad)...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	onLogin(t, anon, "a bad token")
	if _, err := anon.Navigate(srv.cluster + "/"); err != nil {
		t.Fatal(err)
	}
	onLogin(t, anon, "after a bad token")

	// team-a's reader.
	s := b.NewSession(t)
	if _, err := s.Navigate(srv.cluster + "/"); err != nil {
		t.Fatal(err)
	}
	onLogin(t, s, "before logging in")
	if err := s.Do(pasteToken(token)...); err != nil {
		t.Fatal(err)
	}
	waitJS(t, s, `location.pathname === "/" && !!document.querySelector('table#syncs')`, 10*time.Second)
	if who := eval[string](t, s, `(document.querySelector("header .user") || {textContent: ""}).textContent.trim()`); who != "system:serviceaccount:"+teamA+":reader" {
		t.Errorf("the page says it acts as %q, want the token's user system:serviceaccount:%s:reader", who, teamA)
	}
	if eval[bool](t, s, `document.cookie.indexOf("manifestsync-session") >= 0`) {
		t.Errorf("the session cookie is readable by scripts (not HttpOnly)")
	}
	cookies, err := browsertest.Run(s, func(ctx context.Context, _ *chromedp.Target) ([]*network.Cookie, error) {
		res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{srv.cluster + "/"}})
		return res.Cookies, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies {
		if c.Name == "manifestsync-session" {
			session = c
		}
		if strings.Contains(c.Value, token) {
			t.Errorf("cookie %s holds the token", c.Name)
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict || len(session.Value) < 16 {
		t.Errorf("the session cookie is %+v, want manifestsync-session, HttpOnly, SameSite=Strict, a random id", session)
	}
	waitJS(t, s, fmt.Sprintf(`!!document.querySelector('tr[data-ms=%s]')`, q(sc.app.String())), 10*time.Second)
	rows := eval[[]string](t, s, `[...document.querySelectorAll('table#syncs tr[data-ms]')].map(e => e.dataset.ms)`)
	if len(rows) != 1 || rows[0] != sc.app.String() {
		t.Errorf("team-a's reader sees %v, want only %s", rows, sc.app)
	}
	// Another team's page: 403 with the API server's message.
	open(t, s, srv.cluster, msPath(sc.other), 403)
	if msg := eval[string](t, s, `(document.querySelector('#error[role="alert"]') || {textContent: ""}).textContent`); !strings.Contains(msg, "forbidden") {
		t.Errorf("%s: #error says %q, want the API server's forbidden message", msPath(sc.other), msg)
	}
	// Its own page, but no right to patch: suspend fails with the API
	// server's message.
	open(t, s, srv.cluster, msPath(sc.app), 200)
	confirmAction(t, s, `button[data-action="suspend"]`)
	role, text := flash(t, s)
	if role != "alert" || !strings.Contains(text, "forbidden") || !eval[bool](t, s, `document.getElementById("flash").classList.contains("error")`) {
		t.Errorf("suspend without the right: #flash role=%q %q, want role=alert class=error with the API server's forbidden message", role, text)
	}
	if getSync(t, sc.app).Spec.Suspend {
		t.Errorf("team-a's reader suspended %s", sc.app)
	}
	// The live stream works for them too.
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)

	// Logging out ends the session: the login page again.
	click(t, s, `form.logout button[type="submit"]`)
	onLogin(t, s, "after logging out")
	if _, err := s.Navigate(srv.cluster + "/"); err != nil {
		t.Fatal(err)
	}
	onLogin(t, s, "after logging out, /")

	// A bearer token in the header serves too (a client other than a
	// browser, or a proxy that adds it).
	for path, want := range map[string]int{"/": 200, msPath(sc.app): 200, msPath(sc.other): 403} {
		status, body := get(t, srv.cluster+path, "Bearer "+token, "")
		if status != want {
			t.Errorf("GET %s with a bearer token: %d, want %d", path, status, want)
		}
		if path == "/" && (!strings.Contains(body, `data-ms="`+sc.app.String()+`"`) || strings.Contains(body, `data-ms="`+sc.other.String()+`"`)) {
			t.Errorf("GET / with team-a's bearer token does not list only team-a's ManifestSync")
		}
		if strings.Contains(body, token) {
			t.Errorf("GET %s: the token is in the page", path)
		}
	}
	if status, _ := get(t, srv.cluster+"/", "Bearer "+bad, ""); status == 200 {
		t.Errorf("GET / with a bad bearer token: 200")
	}

	// The token is in no URL, no page or response, no event, no log line.
	for _, r := range b.Requests() {
		if strings.Contains(r.URL, token) || strings.Contains(r.URL, bad) {
			t.Errorf("a token in the URL of %s %s", r.Method, r.URL)
		}
		if u, err := url.Parse(r.URL); err == nil && strings.Contains(u.RawQuery, "token") {
			t.Errorf("a token parameter in %s", r.URL)
		}
	}
	for _, tok := range []string{token, bad} {
		if where := b.Find(tok); len(where) > 0 {
			t.Errorf("a token shows in: %v", where)
		}
		for _, line := range srv.clusterLog.all() {
			if strings.Contains(line, tok) {
				t.Errorf("a token in the server's log: %.200s", line)
			}
		}
	}
	if len(srv.clusterLog.all()) == 0 {
		t.Logf("the cluster mode server logged nothing")
	}
}

func testNoSecrets(t *testing.T, sc *scene, srv *uiServers, s *browsertest.Session, b *browsertest.Browser) {
	ctx := context.Background()
	// The values are in the cluster, in the objects the pages show.
	for _, want := range []struct {
		key   client.ObjectKey
		field string
		value string
	}{
		{client.ObjectKey{Namespace: "replicate-secret-web", Name: "wildcard-tls"}, "tls.key", secretTLSKey},
		{client.ObjectKey{Namespace: teamA, Name: "app-credentials"}, "api-key", secretAPIKey},
	} {
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, want.key, sec); err != nil {
			t.Fatalf("Secret %s: %v", want.key, err)
		}
		if string(sec.Data[want.field]) != want.value {
			t.Fatalf("Secret %s: %s is not the test's value: the check below would prove nothing", want.key, want.field)
		}
	}
	pages := []string{"/", "/ms/platform/replicate-secret", "/ms/platform/replicate-secret/diff", "/ms/platform/replicate-secret/history",
		"/ms/platform/replicate-secret/events", msPath(sc.app), msPath(sc.app) + "/diff", msPath(sc.app) + "/events", msPath(sc.app) + "/history?from=1&to=0"}
	for _, p := range pages {
		open(t, s, srv.local, p, 200)
		if strings.HasSuffix(p, "replicate-secret/diff") {
			// The copies went through the diff (each Unchanged): their
			// values were there to leak.
			if n := eval[int](t, s, `document.querySelectorAll('div.diff[data-object^="Secret "]').length`); n != 3 {
				text := eval[string](t, s, `document.getElementById("main").innerText.slice(0, 2000)`)
				t.Errorf("%s shows %d Secrets, want the 3 copies:\n%s", p, n, text)
			}
		}
	}
	// A hand edit of team-a's Secret (drift reported, not corrected): its
	// diff compares two values, both to be masked.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "app-credentials"}}
	patch := fmt.Appendf(nil, `{"data":{"api-key":%q}}`, base64.StdEncoding.EncodeToString([]byte(secretEdited)))
	if err := env.Client.Patch(ctx, sec, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	testenv.Eventually(t, timeout, func() error {
		d, err := view.Describe(getSync(t, sc.app), 0)
		if err != nil {
			return err
		}
		for _, tg := range d.Targets {
			for _, o := range tg.Objects {
				if o.Object == "Secret team-a/app-credentials" && o.State == "Drifted" {
					return nil
				}
			}
		}
		return fmt.Errorf("the operator does not report Secret team-a/app-credentials drifted: %+v", d.Targets)
	})
	t.Logf("the operator reported the Secret drifted %s after the edit", time.Since(edited).Round(10*time.Millisecond))
	open(t, s, srv.local, msPath(sc.app), 200)
	waitJS(t, s, `(function(){var e=document.querySelector('li.node[data-object="Secret team-a/app-credentials"]');return !!e && e.dataset.state==="Drifted"})()`, 10*time.Second)
	open(t, s, srv.local, msPath(sc.app)+"/diff", 200)
	secretDiff := `div.diff[data-object="Secret team-a/app-credentials"]`
	if got := attr(t, s, secretDiff, "data-action"); got != "Configured" {
		t.Errorf("the diff of the edited Secret is %q, want Configured", got)
	}
	// The tree pages show the Secrets (masked) and their YAML.
	open(t, s, srv.local, "/ms/platform/replicate-secret", 200)
	waitJS(t, s, `!!document.querySelector('li.node[data-object="Secret replicate-secret-web/wildcard-tls"] details.yaml pre')`, 10*time.Second)
	// A change while the page listens: the stream carries events.
	requestSync(t, client.ObjectKey{Namespace: platformNS, Name: "replicate-secret"})
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, m := range b.Messages() {
			if strings.Contains(m.Data, "replicate-secret") {
				return nil
			}
		}
		return fmt.Errorf("no server-sent event about replicate-secret among %d", len(b.Messages()))
	})
	b.Settle()
	if missed := b.Missed(); len(missed) > 0 {
		t.Errorf("bodies the browser could not give back, not searched: %v", missed)
	}
	var htmlBodies int
	for _, r := range b.Responses() {
		if strings.Contains(r.Body, "wildcard-tls") {
			htmlBodies++
		}
	}
	if htmlBodies == 0 {
		t.Fatalf("no captured response shows the Secret wildcard-tls: the check would prove nothing")
	}
	for _, v := range []string{secretTLSKey, secretAPIKey, secretEdited} {
		for _, enc := range []string{v, b64(v)} {
			if where := b.Find(enc); len(where) > 0 {
				t.Errorf("a Secret's value (%q) shows in: %v", enc, where)
			}
		}
	}
}

// b64 is the first 20 characters of s in base64, as a Secret's data holds
// it (they do not depend on what follows them).
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s))[:20] }

// get makes a GET request outside the browser, with an Authorization
// header and a Host when given, and returns the status and the body.
func get(t *testing.T, u, auth, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if host != "" {
		req.Host = host
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// testHostCheck: in local mode a request naming another host (a DNS
// rebinding page's) is refused.
func testHostCheck(t *testing.T, srv *uiServers) {
	if status, _ := get(t, srv.local+"/", "", ""); status != 200 {
		t.Fatalf("GET / on loopback: %d", status)
	}
	for _, host := range []string{"evil.example", "evil.example:80"} {
		if status, body := get(t, srv.local+"/", "", host); status == 200 || strings.Contains(body, "data-ms=") {
			t.Errorf("GET / with Host %s: %d, want it refused", host, status)
		}
	}
}

// testHeaders: every page of the UI came with the CSP of the contract (no
// inline script or style), nothing was requested off loopback, and the
// script's refetches got fragments.
func testHeaders(t *testing.T, srv *uiServers, b *browsertest.Browser) {
	var docs int
	for _, r := range b.Responses() {
		u, err := url.Parse(r.URL)
		if err != nil || u.Hostname() != "127.0.0.1" {
			t.Errorf("a request left loopback: %s", r.URL)
			continue
		}
		ours := strings.HasPrefix(r.URL, srv.local+"/") || strings.HasPrefix(r.URL, srv.cluster+"/")
		if r.Type != "Document" || !ours {
			continue
		}
		docs++
		csp := r.Headers["content-security-policy"]
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q", r.URL, csp)
		}
	}
	if docs == 0 {
		t.Errorf("no document captured")
	}
	// The script's refetches get the <main> fragment, not a page.
	var fragments int
	for _, r := range b.Responses() {
		if r.Type != "Fetch" || r.Status != 200 || !strings.Contains(r.MIMEType, "html") {
			continue
		}
		fragments++
		if strings.Contains(strings.ToLower(r.Body), "<html") || strings.Contains(r.Body, `id="main"`) {
			t.Errorf("the fragment of %s is a whole page", r.URL)
		}
	}
	if fragments == 0 {
		t.Errorf("no fragment refetch captured: the pages never updated live")
	}
	// No polling: every refetch followed a change the stream announced
	// (several changes within 250 ms make one refetch).
	var changes int
	for _, m := range b.Messages() {
		if m.Event == "change" {
			changes++
		}
	}
	if fragments > changes {
		t.Errorf("%d refetches for %d changes announced: the pages poll", fragments, changes)
	}
	t.Logf("%d changes announced, %d refetches", changes, fragments)
	for _, r := range b.Requests() {
		if u, err := url.Parse(r.URL); err == nil && u.Scheme != "data" && u.Hostname() != "127.0.0.1" && r.URL != "about:blank" {
			t.Errorf("a request left loopback: %s %s", r.Method, r.URL)
		}
	}
}

// testNoScript: without its script the page still acts, through the
// server's confirmation page.
func testNoScript(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	s := b.NewSession(t)
	if err := s.Do(func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatal(err)
	}
	open(t, s, srv.local, msPath(sc.other), 200)
	before := getSync(t, sc.other).Annotations[webhook.RequestedAtAnnotation]
	eval[bool](t, s, `(window.__beforeAction = true)`)
	click(t, s, `button[data-action="sync"]`)
	waitJS(t, s, `window.__beforeAction === undefined && document.readyState === "complete" && !!document.querySelector('form input[name="confirm"]')`, 15*time.Second)
	if got := getSync(t, sc.other).Annotations[webhook.RequestedAtAnnotation]; got != before {
		t.Errorf("the action ran before it was confirmed")
	}
	eval[bool](t, s, `(window.__beforeAction = true)`)
	click(t, s, `form:has(input[name="confirm"]) button[type="submit"]`)
	waitAnswer(t, s)
	if role, text := flash(t, s); role != "status" {
		t.Errorf("sync without script: #flash role=%q %q", role, text)
	}
	if got := getSync(t, sc.other).Annotations[webhook.RequestedAtAnnotation]; got == before || got == "" {
		t.Errorf("sync without script: %s is %q (was %q)", webhook.RequestedAtAnnotation, got, before)
	}
}

// testCrossOrigin: a page of another origin (another port of 127.0.0.1)
// that posts an action form to the UI is refused, and nothing happens.
func testCrossOrigin(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	action := srv.local + msPath(sc.other) + "/actions/suspend"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>evil</title><form method="post" action="%s">
<input type="hidden" name="confirm" value="yes"><button id="go" type="submit">go</button></form></html>`, action)
	}))
	defer evil.Close()
	s := b.NewSession(t)
	open(t, s, evil.URL, "/", 200)
	eval[bool](t, s, `(window.__beforeAction = true)`)
	click(t, s, "#go")
	waitJS(t, s, `window.__beforeAction === undefined && document.readyState === "complete"`, 15*time.Second)
	if getSync(t, sc.other).Spec.Suspend {
		t.Errorf("a form of another origin suspended %s", sc.other)
		setSuspend(t, sc.other, false)
	}
	var status int64
	for _, r := range b.Responses() {
		if r.URL == action {
			status = r.Status
		}
	}
	if status != http.StatusForbidden {
		t.Errorf("the cross-origin POST %s was answered %d, want 403", action, status)
	}
}

// testChangeWhileLoading: a change that lands after the server rendered a
// page but before the page's event stream is open must still show: the
// stream's request is held (Fetch interception) while team-b's
// ManifestSync is suspended, then let go.
func testChangeWhileLoading(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	s := b.NewSession(t)
	ctx, cancel := context.WithCancel(s.Context())
	defer cancel()
	paused := make(chan fetch.RequestID, 1)
	events := chromedp.Events(ctx, fetch.RequestPaused)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			select {
			case paused <- ev.RequestID:
			default:
			}
		}
	}()
	if err := s.Do(func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/stream*"}}})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatal(err)
	}
	open(t, s, srv.local, msPath(sc.other), 200)
	if !eval[bool](t, s, `!!document.querySelector('button[data-action="suspend"]')`) {
		t.Fatalf("%s is suspended already", sc.other)
	}
	var id fetch.RequestID
	select {
	case id = <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the page opened no event stream")
	}
	setSuspend(t, sc.other, true)
	defer setSuspend(t, sc.other, false)
	// The server's shared watch has seen it when its overview shows it.
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, body := get(t, srv.local+"/", "", ""); !regexpSuspended(body, sc.other.String()) {
			return fmt.Errorf("the overview does not show %s suspended yet", sc.other)
		}
		return nil
	})
	if err := s.Do(func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
			return chromedp.Void{}, err
		}
		_, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitJS(`!!document.querySelector('button[data-action="resume"]')`, promise(t, within)); err != nil {
		t.Errorf("the page of %s never showed it suspended: the change came while the page loaded, before its event stream opened, and the stream did not tell it (%v)", sc.other, err)
	}
}

// testFocusAcrossRefresh: a keyboard user's focus, on a button, a link or
// a tree node's YAML toggle, none with an id, stays where it was when the page refreshes itself (CI's
// Actions check once pressed Enter on a body a refresh had left focused).
func testFocusAcrossRefresh(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	s := b.NewSession(t)
	open(t, s, srv.local, msPath(sc.other), 200)
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)
	for _, sel := range []string{`button[data-action="sync"]`, `#main a[href*="/history"]`, `#main li[data-object] > details > summary`} {
		if !eval[bool](t, s, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e || e.id) return false; e.focus(); return document.activeElement === e })()`, sel)) {
			t.Fatalf("%s: no such element without an id to focus", sel)
		}
		eval[bool](t, s, `(document.getElementById("main").firstElementChild.__old = true)`)
		requestSync(t, sc.other)
		waitJS(t, s, `!document.getElementById("main").firstElementChild.__old`, 10*time.Second)
		if !eval[bool](t, s, fmt.Sprintf(`document.activeElement === document.querySelector(%q)`, sel)) {
			t.Errorf("a refresh moved the focus from %s to %s", sel, eval[string](t, s, `document.activeElement.outerHTML.slice(0, 120)`))
		}
	}
}

// testClickAcrossRefresh: the page refreshes itself between the press of
// the mouse on a button and its release (CI's Actions check once lost a
// click on Resume so: the operator wrote the status of the suspend while
// it clicked). The click must still ask, and the refresh follow it.
func testClickAcrossRefresh(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	s := b.NewSession(t)
	open(t, s, srv.local, msPath(sc.other), 200)
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)
	const button = `button[data-action="suspend"]`
	at := eval[[]float64](t, s, fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2] })()`, button))
	mouse := func(typ input.DispatchMouseEventType) {
		t.Helper()
		p := input.DispatchMouseEventParams{Type: typ, X: at[0], Y: at[1], Button: input.MouseButtonLeft, ClickCount: 1}
		if typ == input.DispatchMouseEventTypeMousePressed {
			p.Buttons = 1
		}
		if err := s.Do(func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, p)
			return chromedp.Void{}, err
		}); err != nil {
			t.Fatalf("mouse %s at %v: %v", typ, at, err)
		}
	}
	// The page's fetches of its fragment, done.
	const fetches = `performance.getEntriesByType("resource").filter(e => e.initiatorType === "fetch").length`
	n := eval[int](t, s, fetches)
	eval[bool](t, s, `(document.getElementById("main").firstElementChild.__old = true)`)
	mouse(input.DispatchMouseEventTypeMousePressed)
	requestSync(t, sc.other)
	waitJS(t, s, fmt.Sprintf("%s > %d", fetches, n), 10*time.Second)
	time.Sleep(300 * time.Millisecond) // its text read
	if !eval[bool](t, s, `!!document.getElementById("main").firstElementChild.__old`) {
		t.Errorf("the page swapped its <main> while a button was pressed")
	}
	mouse(input.DispatchMouseEventTypeMouseReleased)
	if err := s.WaitJS(`document.getElementById("confirm").open`, within); err != nil {
		t.Fatalf("a click a refresh came between the press and the release of did not ask: %v", err)
	}
	if err := s.WaitJS(`!document.getElementById("main").firstElementChild.__old`, within); err != nil {
		t.Errorf("the refresh held while the button was pressed did not follow its release: %v", err)
	}
	click(t, s, "#confirm-cancel")
	waitJS(t, s, `!document.getElementById("confirm").open`, within)
	if getSync(t, sc.other).Spec.Suspend {
		t.Errorf("a cancelled suspend suspended %s", sc.other)
		setSuspend(t, sc.other, false)
	}
}

// regexpSuspended reports whether the overview's row of key says
// data-suspended="true".
func regexpSuspended(body, key string) bool {
	re := regexp.MustCompile(`<tr[^>]*data-ms="` + regexp.QuoteMeta(key) + `"[^>]*>`)
	return strings.Contains(re.FindString(body), `data-suspended="true"`)
}

// testConfirmAcrossRefresh: the page refreshes itself while its
// confirmation dialog is open (a change of the ManifestSync: the operator
// writes its status while one looks); the confirmed action must still be
// done.
func testConfirmAcrossRefresh(t *testing.T, sc *scene, srv *uiServers, b *browsertest.Browser) {
	s := b.NewSession(t)
	open(t, s, srv.local, msPath(sc.other), 200)
	waitJS(t, s, `document.getElementById("live").classList.contains("on")`, 10*time.Second)
	click(t, s, `button[data-action="suspend"]`)
	waitJS(t, s, `document.getElementById("confirm").open`, within)
	// Mark the page's <main>: a refresh replaces it.
	eval[bool](t, s, `(document.getElementById("main").firstElementChild.__old = true)`)
	requestSync(t, sc.other)
	waitJS(t, s, `!document.getElementById("main").firstElementChild.__old`, 10*time.Second)
	if !eval[bool](t, s, `document.getElementById("confirm").open`) {
		t.Fatalf("the refresh closed the dialog")
	}
	eval[bool](t, s, `(window.__beforeAction = true)`)
	click(t, s, "#confirm-ok")
	if err := s.WaitJS(`window.__beforeAction === undefined && document.readyState === "complete" && !!document.getElementById("flash")`, 10*time.Second); err != nil {
		t.Errorf("confirming after the page refreshed itself did nothing: %v", err)
	}
	if !getSync(t, sc.other).Spec.Suspend {
		t.Errorf("the suspend confirmed after a refresh was not done")
	} else {
		setSuspend(t, sc.other, false)
	}
}
