package ui

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// TestClusterModeWithoutAGoodTokenServesOnlyTheLoginPage: with no token,
// a bad bearer token, a bad session cookie or a bad login, every page
// leads to the login page and the stream and actions answer 401; the
// token tried is never logged nor echoed back.
func TestClusterModeWithoutAGoodTokenServesOnlyTheLoginPage(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	u := startUI(t, Options{Mode: ModeCluster})
	c := browser(t)
	const bad = "not-a-token-4b1d9c2e7f"

	for _, token := range []string{"", bad} {
		for _, path := range []string{"/", "/ms/" + ns + "/app", "/ms/" + ns + "/app/history", "/ms/" + ns + "/app/events"} {
			r := u.do(t, c, http.MethodGet, path, token, nil)
			if r.status != http.StatusSeeOther || r.header.Get("Location") != "/login" {
				t.Errorf("GET %s (token %v): %d to %q, want 303 to /login", path, token != "", r.status, r.header.Get("Location"))
			}
			if strings.Contains(r.body, "data-ms") || strings.Contains(r.body, ns) {
				t.Errorf("GET %s without a good token shows a ManifestSync: %s", path, r.body)
			}
		}
		if r := u.do(t, c, http.MethodGet, "/stream", token, nil); r.status != http.StatusUnauthorized {
			t.Errorf("GET /stream (token %v): %d, want 401", token != "", r.status)
		}
		r := u.do(t, c, http.MethodPost, "/ms/"+ns+"/app/actions/suspend", token, url.Values{"confirm": {"yes"}})
		if r.status != http.StatusUnauthorized {
			t.Errorf("POST suspend (token %v): %d, want 401", token != "", r.status)
		}
	}
	// A forged session cookie is no session.
	req, _ := http.NewRequest(http.MethodGet, u.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: "forged"})
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / with a forged session: %d, want 303", resp.StatusCode)
	}

	login := u.do(t, c, http.MethodGet, "/login", "", nil)
	for _, want := range []string{`<input id="token" name="token" type="password"`, `<button type="submit"`} {
		if !strings.Contains(login.body, want) {
			t.Errorf("the login page has no %s", want)
		}
	}
	r := u.do(t, c, http.MethodPost, "/login", "", url.Values{"token": {bad}})
	if r.status != http.StatusUnauthorized || !strings.Contains(r.body, "did not accept") {
		t.Errorf("POST /login with a bad token: %d %s", r.status, r.body)
	}
	if len(r.header.Values("Set-Cookie")) > 0 {
		t.Errorf("a bad login set a cookie: %v", r.header.Values("Set-Cookie"))
	}
	u.checkNoSecret(t, bad)
}

// TestClusterModeShowsAndDoesOnlyWhatRBACGrants: a user who may read only
// one namespace sees only its ManifestSyncs, gets the API server's 403 for
// another's page and cannot suspend one (its message in #flash); a user
// who may patch can, and an Event names them. The tokens are never logged
// nor put in a response.
func TestClusterModeShowsAndDoesOnlyWhatRBACGrants(t *testing.T) {
	teamA := env.Namespace(t, nil)
	other := env.Namespace(t, nil)
	createSync(t, teamA, "web")
	createSync(t, teamA, "db")
	createSync(t, other, "secret-app")
	reader, readerUser := serviceAccount(t, teamA, "reader")
	grant(t, teamA, teamA, "reader", "get", "list", "watch")
	operator, operatorUser := serviceAccount(t, teamA, "operator")
	grant(t, teamA, teamA, "operator", "get", "list", "watch", "patch")

	u := startUI(t, Options{Mode: ModeCluster, Cache: startCache(t)})
	c := browser(t)

	// The reader logs in with the form; the session cookie carries on.
	r := u.do(t, c, http.MethodPost, "/login", "", url.Values{"token": {reader}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
		t.Fatalf("POST /login: %d %q", r.status, r.header.Get("Location"))
	}
	cookie := r.header.Get("Set-Cookie")
	for _, want := range []string{sessionCookie + "=", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("the session cookie %q has no %s", cookie, want)
		}
	}
	overview := u.do(t, c, http.MethodGet, "/", "", nil)
	if overview.status != http.StatusOK {
		t.Fatalf("GET /: %d %s", overview.status, overview.body)
	}
	if got, want := rows(overview.body), []string{teamA + "/db", teamA + "/web"}; !slices.Equal(got, want) {
		t.Errorf("the reader's overview lists %v, want %v", got, want)
	}
	if !strings.Contains(overview.body, readerUser) {
		t.Errorf("the overview does not say who the user is (%s)", readerUser)
	}
	if strings.Contains(overview.body, "secret-app") || strings.Contains(overview.body, other) {
		t.Errorf("the reader's overview shows the other namespace")
	}

	// Another namespace's page: the API server's refusal.
	page := u.do(t, c, http.MethodGet, "/ms/"+other+"/secret-app", "", nil)
	msg := errorOf(page.body)
	if page.status != http.StatusForbidden || !strings.Contains(msg, "is forbidden") || !strings.Contains(msg, readerUser) ||
		!strings.Contains(msg, `cannot get resource "manifestsyncs"`) {
		t.Errorf("GET another namespace's page: %d, #error %q", page.status, msg)
	}
	// Its own namespace's page shows the ManifestSync.
	page = u.do(t, c, http.MethodGet, "/ms/"+teamA+"/web", "", nil)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="inputs"`) ||
		!strings.Contains(page.body, "https://github.com/example/apps/commit/4f2c0a1b2c3d4e5f60718293a4b5c6d7e8f90123") {
		t.Errorf("GET its own page: %d, no inputs with the commit link: %s", page.status, page.body)
	}

	// The reader may not patch: the API server's message, 403.
	r = u.do(t, c, http.MethodPost, "/ms/"+teamA+"/web/actions/suspend", "", url.Values{"confirm": {"yes"}})
	role, text := flashOf(r.body)
	if r.status != http.StatusForbidden || role != "alert" || !strings.Contains(text, "is forbidden") || !strings.Contains(text, `cannot patch resource "manifestsyncs"`) {
		t.Errorf("the reader's suspend: %d, #flash %s %q", r.status, role, text)
	}
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: teamA, Name: "web"}, ms); err != nil {
		t.Fatal(err)
	}
	if ms.Spec.Suspend {
		t.Errorf("the reader's refused suspend suspended it")
	}

	// Without confirm=yes an action only asks.
	r = u.do(t, c, http.MethodPost, "/ms/"+teamA+"/web/actions/suspend", operator, url.Values{})
	if r.status != http.StatusOK || !strings.Contains(r.body, `name="confirm" value="yes"`) {
		t.Errorf("an unconfirmed suspend: %d, no confirmation form", r.status)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: teamA, Name: "web"}, ms); err != nil {
		t.Fatal(err)
	}
	if ms.Spec.Suspend {
		t.Fatalf("an unconfirmed suspend suspended it")
	}

	// The operator (a bearer header) may patch.
	r = u.do(t, c, http.MethodPost, "/ms/"+teamA+"/web/actions/suspend", operator, url.Values{"confirm": {"yes"}})
	role, text = flashOf(r.body)
	if r.status != http.StatusOK || role != "status" {
		t.Errorf("the operator's suspend: %d, #flash %s %q", r.status, role, text)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: teamA, Name: "web"}, ms); err != nil {
		t.Fatal(err)
	}
	if !ms.Spec.Suspend {
		t.Errorf("after the operator's suspend, spec.suspend is false")
	}
	if !strings.Contains(r.body, `data-action="resume"`) {
		t.Errorf("the page after suspending offers no resume")
	}
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(teamA)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Items {
		if e.Reason == "UISuspend" && e.InvolvedObject.Name == "web" && e.InvolvedObject.Kind == "ManifestSync" {
			found = strings.Contains(e.Message, operatorUser)
			if !found {
				t.Errorf("the UISuspend event does not name %s: %q", operatorUser, e.Message)
			}
		}
	}
	if !found {
		t.Errorf("no UISuspend event on %s/web", teamA)
	}

	// Logging out ends the session.
	if r := u.do(t, c, http.MethodPost, "/logout", "", url.Values{}); r.status != http.StatusSeeOther {
		t.Errorf("POST /logout: %d", r.status)
	}
	if r := u.do(t, c, http.MethodGet, "/", "", nil); r.status != http.StatusSeeOther {
		t.Errorf("GET / after logging out: %d, want 303", r.status)
	}

	u.checkNoSecret(t, reader)
	u.checkNoSecret(t, operator)
}

// TestStreamSendsAChangeWithinOneSecond: a status update reaches an open
// stream within a second, and a change of a ManifestSync the user may not
// get never does.
func TestStreamSendsAChangeWithinOneSecond(t *testing.T) {
	mine := env.Namespace(t, nil)
	other := env.Namespace(t, nil)
	createSync(t, mine, "app")
	createSync(t, other, "hidden")
	token, _ := serviceAccount(t, mine, "viewer")
	grant(t, mine, mine, "viewer", "get", "list", "watch")
	u := startUI(t, Options{Mode: ModeCluster})
	events := u.openStream(t, token)
	time.Sleep(200 * time.Millisecond) // the stream is subscribed

	update := func(ns, name, message string) time.Time {
		t.Helper()
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
			t.Fatal(err)
		}
		ms.Status.Conditions[0].Message = message
		at := time.Now()
		if err := env.Client.Status().Update(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		return at
	}
	update(other, "hidden", "changed where the viewer may not look")
	at := update(mine, "app", "changed")
	deadline := time.After(time.Second)
	for {
		select {
		case ev := <-events:
			var ch change
			if err := json.Unmarshal([]byte(ev.data), &ch); err != nil {
				t.Fatalf("event data %q: %v", ev.data, err)
			}
			if ev.event != "change" {
				t.Fatalf("event %q", ev.event)
			}
			if ch.Namespace == other {
				t.Fatalf("the stream sent a change the viewer may not get: %s", ev.data)
			}
			if ch.Namespace == mine && ch.Name == "app" && ch.Kind == "ManifestSync" {
				t.Logf("the change arrived after %v", ev.at.Sub(at))
				u.checkNoSecret(t, token)
				return
			}
		case <-deadline:
			t.Fatal("no change within 1 s of the status update")
		}
	}
}

// TestLocalModeRefusesAForeignHost: a request whose Host is a name other
// than localhost (a DNS rebinding) is refused; an address or localhost is
// served.
func TestLocalModeRefusesAForeignHost(t *testing.T) {
	u := startUI(t, Options{Mode: ModeLocal})
	port := u.Listener.Addr().String()[strings.LastIndex(u.Listener.Addr().String(), ":"):]
	for host, want := range map[string]int{
		"attacker.example" + port: http.StatusMisdirectedRequest,
		"attacker.example":        http.StatusMisdirectedRequest,
		"127.0.0.1" + port:        http.StatusOK,
		"localhost" + port:        http.StatusOK,
		"[::1]" + port:            http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, u.URL+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestLocalModeActsAsTheKubeconfigUser: in local mode the overview lists
// what the kubeconfig may list, with the contract's attributes, and an
// action is done (and its event recorded) with the kubeconfig.
func TestLocalModeActsAsTheKubeconfigUser(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	r := u.do(t, c, http.MethodGet, "/?ns="+ns, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /: %d", r.status)
	}
	if got := rows(r.body); !slices.Equal(got, []string{ns + "/app"}) {
		t.Errorf("the overview of %s lists %v", ns, got)
	}
	for _, want := range []string{`data-ready="True"`, `data-health="Healthy"`, `data-suspended="false"`, `data-drifted="false"`,
		`<span data-count="total">1</span>`, `<span data-count="ready">1</span>`, `<code title="sha256:0123456789abcdef0123456789abcdef">sha256:0123456789ab</code>`,
		`href="/ms/` + ns + `/app"`, ">1/1<"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the overview has no %s", want)
		}
	}
	if st := r.header.Get("Server-Timing"); !strings.HasPrefix(st, "app;dur=") {
		t.Errorf("Server-Timing %q", st)
	}
	// The fragment is <main>'s content alone.
	req, _ := http.NewRequest(http.MethodGet, u.URL+"/?ns="+ns, nil)
	req.Header.Set("X-Fragment", "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET / X-Fragment: %d", resp.StatusCode)
	}

	r = u.do(t, c, http.MethodPost, "/ms/"+ns+"/app/actions/sync", "", url.Values{"confirm": {"yes"}})
	if role, text := flashOf(r.body); r.status != http.StatusOK || role != "status" {
		t.Errorf("sync now: %d, #flash %s %q", r.status, role, text)
	}
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, ms); err != nil {
		t.Fatal(err)
	}
	if at, err := time.Parse(time.RFC3339Nano, ms.Annotations["manifestsync.dev/requested-at"]); err != nil || time.Since(at) > time.Minute {
		t.Errorf("requested-at %q after sync now", ms.Annotations["manifestsync.dev/requested-at"])
	}
	testEvent(t, ns, "app", "UISync")
}

// TestCrossOriginPostIsRefused: a POST a foreign page makes the browser
// send is refused before it acts.
func TestCrossOriginPostIsRefused(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	u := startUI(t, Options{Mode: ModeLocal})
	req, _ := http.NewRequest(http.MethodPost, u.URL+"/ms/"+ns+"/app/actions/suspend", strings.NewReader("confirm=yes"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://attacker.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST: %d, want 403", resp.StatusCode)
	}
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, ms); err != nil {
		t.Fatal(err)
	}
	if ms.Spec.Suspend {
		t.Errorf("a cross-site POST suspended it")
	}
}

// testEvent fails t unless the ManifestSync has an event of reason.
func testEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name {
			return
		}
	}
	t.Errorf("no %s event on %s/%s", reason, ns, name)
}

// TestRollbackAndUndoFromTheHistoryPage: the history page lists the
// entries with a rollback button each; a rollback pins the git source to
// the entry's commit, offers an undo, and the undo restores the ref; each
// leaves its event.
func TestRollbackAndUndoFromTheHistoryPage(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	path := "/ms/" + ns + "/app"

	r := u.do(t, c, http.MethodGet, path+"/history", "", nil)
	for _, want := range []string{`<table id="history"`, `<tr data-entry="0"`, `data-action="rollback" data-entry="0"`, `aria-current="page">History`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the history page has no %s", want)
		}
	}
	if strings.Contains(r.body, `data-action="undo"`) {
		t.Errorf("the history page offers an undo before any rollback")
	}

	r = u.do(t, c, http.MethodPost, path+"/actions/rollback", "", url.Values{"entry": {"0"}, "confirm": {"yes"}})
	if role, text := flashOf(r.body); r.status != http.StatusOK || role != "status" || !strings.Contains(text, "Rolled back to history entry 0") {
		t.Fatalf("rollback: %d, #flash %s %q", r.status, role, text)
	}
	ms := &v1alpha1.ManifestSync{}
	key := client.ObjectKey{Namespace: ns, Name: "app"}
	if err := env.Client.Get(context.Background(), key, ms); err != nil {
		t.Fatal(err)
	}
	if got := ms.Spec.Sources[0].Git.Ref.Commit; got != "4f2c0a1b2c3d4e5f60718293a4b5c6d7e8f90123" {
		t.Errorf("after the rollback the source's ref.commit is %q", got)
	}
	if !strings.Contains(r.body, `data-action="undo"`) {
		t.Errorf("the page after a rollback offers no undo")
	}
	testEvent(t, ns, "app", "UIRollback")

	r = u.do(t, c, http.MethodPost, path+"/actions/undo", "", url.Values{"confirm": {"yes"}})
	if role, text := flashOf(r.body); r.status != http.StatusOK || role != "status" {
		t.Fatalf("undo: %d, #flash %s %q", r.status, role, text)
	}
	if err := env.Client.Get(context.Background(), key, ms); err != nil {
		t.Fatal(err)
	}
	if ref := ms.Spec.Sources[0].Git.Ref; ref.Commit != "" || ref.Branch != "main" {
		t.Errorf("after the undo the source's ref is %+v", ref)
	}
	testEvent(t, ns, "app", "UIUndo")

	// A rollback to an entry that is not there is the history's error.
	r = u.do(t, c, http.MethodPost, path+"/actions/rollback", "", url.Values{"entry": {"7"}, "confirm": {"yes"}})
	if role, text := flashOf(r.body); role != "alert" || !strings.Contains(text, "no history entry 7") {
		t.Errorf("a rollback to entry 7: %d, #flash %s %q", r.status, role, text)
	}
}

// TestOverviewFiltersAndCounts: the namespace, search and state filters
// pick the rows; the counts are of the namespace and search, by state.
func TestOverviewFiltersAndCounts(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "frontend")
	createSync(t, ns, "backend")
	failing := createSync(t, ns, "payments")
	failing.Status.Conditions[0].Status = "False"
	failing.Status.Conditions[0].Reason = v1alpha1.ReasonApplyFailed
	failing.Status.Conditions[0].Message = "the API server said no"
	failing.Status.Conditions[1].Status = "False"
	failing.Status.Conditions[1].Reason = v1alpha1.ReasonHealthCheckFailed
	failing.Status.Inventory[0].Drifted = true
	if err := env.Client.Status().Update(context.Background(), failing); err != nil {
		t.Fatal(err)
	}
	suspended := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "backend"}, suspended); err != nil {
		t.Fatal(err)
	}
	suspended.Spec.Suspend = true
	if err := env.Client.Update(context.Background(), suspended); err != nil {
		t.Fatal(err)
	}
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	for _, tc := range []struct {
		query string
		rows  []string
	}{
		{"", []string{ns + "/backend", ns + "/frontend", ns + "/payments"}},
		{"&state=ready", []string{ns + "/frontend"}}, // backend's spec changed: not Ready at its generation
		{"&state=notready", []string{ns + "/backend", ns + "/payments"}},
		{"&state=suspended", []string{ns + "/backend"}},
		{"&state=drifted", []string{ns + "/payments"}},
		{"&state=degraded", []string{ns + "/payments"}},
		{"&q=FRONT", []string{ns + "/frontend"}},
		{"&q=said+no", []string{ns + "/payments"}},
	} {
		r := u.do(t, c, http.MethodGet, "/?ns="+ns+tc.query, "", nil)
		if got := rows(r.body); !slices.Equal(got, tc.rows) {
			t.Errorf("?ns=%s%s lists %v, want %v", ns, tc.query, got, tc.rows)
		}
	}
	r := u.do(t, c, http.MethodGet, "/?ns="+ns, "", nil)
	for _, want := range []string{`<span data-count="total">3</span>`, `<span data-count="ready">1</span>`, `<span data-count="notready">2</span>`,
		`<span data-count="suspended">1</span>`, `<span data-count="drifted">1</span>`,
		`<tr data-ms="` + ns + `/payments" data-ready="False" data-health="Degraded" data-suspended="false" data-drifted="true">`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the overview has no %s", want)
		}
	}
}

// TestPagesOfOneManifestSync: the tree tab shows inputs, conditions and
// the target's objects; the diff tab says it is not available without an
// evaluator; the events tab lists the events newest first; a fragment is
// <main>'s content alone; a missing ManifestSync is the API server's 404.
func TestPagesOfOneManifestSync(t *testing.T) {
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	path := "/ms/" + ns + "/app"

	r := u.do(t, c, http.MethodGet, path, "", nil)
	for _, want := range []string{`<nav class="tabs"`, `id="inputs"`, `<table id="conditions"`, `data-condition="Ready"`,
		`<section class="target" data-target="app"`, `<div class="wave" data-wave="0">`,
		`data-object="ConfigMap ` + ns + `/cfg"`, `data-state="Synced"`, `data-managed="true"`, `data-action="sync"`, `data-action="suspend"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the tree page has no %s", want)
		}
	}
	r = u.do(t, c, http.MethodGet, path+"/diff", "", nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="diff-unavailable"`) {
		t.Errorf("the diff page without an evaluator: %d", r.status)
	}

	for range 2 {
		r := u.do(t, c, http.MethodPost, path+"/actions/sync", "", url.Values{"confirm": {"yes"}})
		if r.status != http.StatusOK {
			t.Fatalf("sync now: %d", r.status)
		}
		time.Sleep(1100 * time.Millisecond) // events' times are in seconds
	}
	r = u.do(t, c, http.MethodGet, path+"/events", "", nil)
	if n := strings.Count(r.body, `data-reason="UISync"`); r.status != http.StatusOK || n != 2 {
		t.Errorf("the events page: %d with %d UISync events, want 2", r.status, n)
	}

	req, _ := http.NewRequest(http.MethodGet, u.URL+path, nil)
	req.Header.Set("X-Fragment", "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "<html") || strings.Contains(string(b), `<main`) || !strings.Contains(string(b), `<nav class="tabs"`) {
		t.Errorf("the fragment is not <main>'s content: %.300s", b)
	}

	r = u.do(t, c, http.MethodGet, "/ms/"+ns+"/nothing", "", nil)
	if r.status != http.StatusNotFound || !strings.Contains(errorOf(r.body), `"nothing" not found`) {
		t.Errorf("a missing ManifestSync: %d, #error %q", r.status, errorOf(r.body))
	}
}

// inProcess evaluates in this process, without sources: the tests' stand
// in for cmd/engine's sandboxed Evaluator.
type inProcess struct{}

func (inProcess) Evaluate(ctx context.Context, _ client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error) {
	return engine.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Name: ms.Name}, engine.Options{})
}

// TestDiffPageIsTheUsersDryRun: the diff tab shows what a sync would
// change, object by object, as the user's own server-side dry run: a user
// who may change the objects sees their diffs (a Secret's values masked),
// one who may not sees the API server's refusal.
func TestDiffPageIsTheUsersDryRun(t *testing.T) {
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: `
def main(ctx):
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "new"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"password": "diff-secret-value"}},
    ]
`}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: ns}},
		},
	}
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg",
		Labels: map[string]string{controller.OwnerLabel: ns + ".app"}}, Data: map[string]string{"a": "old"}}); err != nil {
		t.Fatal(err)
	}
	editor, _ := serviceAccount(t, ns, "editor")
	grant(t, ns, ns, "editor", "get", "list", "watch")
	objects := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "objects"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get", "list", "create", "patch", "update"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "objects"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "objects"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "editor"}}}
	for _, o := range []client.Object{objects, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	viewer, _ := serviceAccount(t, ns, "viewer")
	grant(t, ns, ns, "viewer", "get", "list", "watch")

	u := startUI(t, Options{Mode: ModeCluster, Evaluator: inProcess{}})
	c := browser(t)
	r := u.do(t, c, http.MethodGet, "/ms/"+ns+"/app/diff", editor, nil)
	for _, want := range []string{`<div class="diff" data-object="ConfigMap ` + ns + `/cfg" data-action="Configured"`,
		`data-object="Secret ` + ns + `/creds" data-action="Created"`, "-  a: old", "+  a: new", `<pre class="udiff">`} {
		if !strings.Contains(html.UnescapeString(r.body), want) {
			t.Errorf("the editor's diff page has no %s", want)
		}
	}
	if strings.Contains(r.body, "diff-secret-value") {
		t.Errorf("the diff page shows the Secret's value")
	}
	r = u.do(t, c, http.MethodGet, "/ms/"+ns+"/app/diff", viewer, nil)
	if !strings.Contains(html.UnescapeString(r.body), "forbidden") || strings.Contains(r.body, `data-action="Configured"`) {
		t.Errorf("the viewer's diff page does not show the API server's refusal: %s", r.body)
	}
	u.checkNoSecret(t, editor)
	u.checkNoSecret(t, viewer)
	u.checkNoSecret(t, "diff-secret-value")
}

// TestStreamOutlivesTheReadTimeout: served by ListenAndServe, a stream
// still delivers changes after the server's read timeout, and the server
// stops when its context ends.
func TestStreamOutlivesTheReadTimeout(t *testing.T) {
	env.Need(t)
	old := readTimeout
	readTimeout = time.Second
	t.Cleanup(func() { readTimeout = old })
	ns := env.Namespace(t, nil)
	createSync(t, ns, "app")
	logs := &logBuffer{}
	s, err := New(Options{Mode: ModeLocal, Config: env.Config, Log: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watch := make(chan error, 1)
	go func() { watch <- s.Start(ctx) }()
	addr := testenv.FreeAddr(t)
	served := make(chan error, 1)
	go func() { served <- ListenAndServe(ctx, addr, s, logs.logger()) }()
	t.Cleanup(func() {
		cancel()
		for _, ch := range []chan error{watch, served} {
			select {
			case err := <-ch:
				if err != nil {
					t.Errorf("stopping: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the server did not stop with its context")
			}
		}
	})
	u := &testUI{Server: &httptest.Server{URL: "http://" + addr}, logs: logs}
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(u.URL + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	events := u.openStream(t, "")
	time.Sleep(2500 * time.Millisecond) // past the read timeout
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, ms); err != nil {
		t.Fatal(err)
	}
	ms.Status.Conditions[0].Message = "later"
	if err := env.Client.Status().Update(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-events:
			if strings.Contains(ev.data, `"name":"app"`) && strings.Contains(ev.data, ns) {
				return
			}
		case <-deadline:
			t.Fatal("no change on the stream after the read timeout")
		}
	}
}

// TestLocalModeFallsBackToTheContextsNamespace: a kubeconfig that may not
// list ManifestSyncs in every namespace watches its context's namespace,
// and the overview says so.
func TestLocalModeFallsBackToTheContextsNamespace(t *testing.T) {
	mine := env.Namespace(t, nil)
	other := env.Namespace(t, nil)
	createSync(t, mine, "app")
	createSync(t, other, "app")
	token, _ := serviceAccount(t, mine, "dev")
	grant(t, mine, mine, "dev", "get", "list", "watch")
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	u := startUI(t, Options{Mode: ModeLocal, Config: cfg, Namespace: mine})
	r := u.do(t, browser(t), http.MethodGet, "/", "", nil)
	if got := rows(r.body); !slices.Equal(got, []string{mine + "/app"}) {
		t.Errorf("the overview lists %v, want only %s/app", got, mine)
	}
	if !strings.Contains(r.body, "Showing namespace "+mine+" only") {
		t.Errorf("the overview does not say it shows one namespace")
	}
	u.checkNoSecret(t, token)
}

// TestStaticFilesAndSecurityHeaders: the script, the stylesheet and the
// icon are served from the binary, the templates are not; every answer
// carries the security headers; /healthz answers.
func TestStaticFilesAndSecurityHeaders(t *testing.T) {
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	for path, want := range map[string]string{
		"/static/app.js":      "text/javascript",
		"/static/app.css":     "text/css",
		"/static/favicon.svg": "image/svg+xml",
		"/healthz":            "text/plain",
		"/":                   "text/html",
	} {
		r := u.do(t, c, http.MethodGet, path, "", nil)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, r.status, r.header.Get("Content-Type"), want)
		}
		for h, v := range map[string]string{
			"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
		} {
			if !strings.HasPrefix(r.header.Get(h), v) {
				t.Errorf("GET %s: %s %q, want %q", path, h, r.header.Get(h), v)
			}
		}
	}
	for _, path := range []string{"/static/layout.html", "/static/", "/static/../ui.go", "/nothing"} {
		if r := u.do(t, c, http.MethodGet, path, "", nil); r.status != http.StatusNotFound && r.status != http.StatusMovedPermanently && r.status != http.StatusTemporaryRedirect {
			t.Errorf("GET %s: %d, want 404 (or a redirect to the clean path)", path, r.status)
		}
	}
	// A body past the bound is refused, not read.
	big := url.Values{"token": {strings.Repeat("x", maxBody+1)}}
	if r := u.do(t, c, http.MethodPost, "/ms/default/x/actions/sync", "", big); r.status != http.StatusBadRequest {
		t.Errorf("a POST of %d bytes: %d, want 400", maxBody+1, r.status)
	}
}

// TestHistoryBadgesOnlyTheAppliedEntry: a revision in the history more than
// once (A, B, then A again) is badged "applied" on the entry that is
// applied now only: the newest of that revision that synced, not an older
// one, nor a newer one whose apply failed.
func TestHistoryBadgesOnlyTheAppliedEntry(t *testing.T) {
	ns := env.Namespace(t, nil)
	u := startUI(t, Options{Mode: ModeLocal})
	c := browser(t)
	const a, b = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	for _, tc := range []struct {
		name    string
		history []v1alpha1.HistoryEntry
		want    string // the applied entry
	}{
		{"rolled-back", []v1alpha1.HistoryEntry{{Revision: a, Result: "Synced"}, {Revision: b, Result: "Synced"}, {Revision: a, Result: "Synced"}}, "0"},
		{"failed-again", []v1alpha1.HistoryEntry{{Revision: a, Result: "ApplyFailed"}, {Revision: b, Result: "ApplyFailed"}, {Revision: a, Result: "Synced"}}, "2"},
	} {
		ms := createSync(t, ns, tc.name)
		ms.Status.LastAppliedRevision = a
		for i := range tc.history {
			tc.history[i].Time = metav1.NewTime(time.Now().Add(-time.Duration(i) * time.Minute))
			tc.history[i].Inputs = ms.Status.History[0].Inputs
		}
		ms.Status.History = tc.history
		if err := env.Client.Status().Update(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		r := u.do(t, c, http.MethodGet, "/ms/"+ns+"/"+tc.name+"/history", "", nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: history page: %d", tc.name, r.status)
		}
		var applied, current []string
		for _, row := range strings.Split(r.body, `<tr data-entry="`)[1:] {
			row, _, _ = strings.Cut(row, "</tr>")
			n, rest, _ := strings.Cut(row, `"`)
			if strings.Contains(row, `<span class="badge ok">applied</span>`) {
				applied = append(applied, n)
			}
			if strings.HasPrefix(rest, ` class="current"`) {
				current = append(current, n)
			}
		}
		if want := []string{tc.want}; !slices.Equal(applied, want) || !slices.Equal(current, want) {
			t.Errorf("%s: entries badged applied %v, marked current %v; want %v", tc.name, applied, current, want)
		}
	}
}
