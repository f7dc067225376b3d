package ui

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/history"
	"github.com/manifestsync/manifestsync/operator/view"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// page is what every template gets.
type page struct {
	Title string
	// User is who the page is for; Cluster shows the log-out button.
	User    string
	Cluster bool
	Flash   *flash
	// Self is the page's own URL, which the script refetches on a change
	// (a POST's answer shows the page it acted on).
	Self string
	// Since is the cursor of the store when the request came: the page's
	// stream starts from there.
	Since string
	Data  any
}

// flash is the outcome of an action.
type flash struct {
	Error bool
	Text  string
}

// render writes the page of template name; with the header X-Fragment: 1
// only the content of <main>, which the script swaps in.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	t := templates[name]
	if t == nil {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	p.Cluster = s.opts.Mode == ModeCluster
	if p.Self == "" {
		p.Self = r.URL.RequestURI()
	}
	if c, ok := r.Context().Value(cursorKey{}).(cursor); ok {
		p.Since = c.String()
	}
	which := "layout"
	if r.Header.Get("X-Fragment") == "1" {
		which = "main"
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, which, p); err != nil {
		s.log.Error(err, "rendering a page", "page", name)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	body := b.Bytes()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "X-Fragment, Accept-Encoding")
	// A large page (the overview of a thousand) is refetched on every
	// change it shows: compressed, it is a tenth of the bytes.
	if len(body) > 8<<10 && acceptsGzip(r) {
		if z, err := gzipped(body); err == nil {
			body = z
			h.Set("Content-Encoding", "gzip")
		}
	}
	if st := serverTiming(r); st != "" {
		h.Set("Server-Timing", st)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// acceptsGzip reports whether the client takes a gzip body.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

var gzipWriters = sync.Pool{New: func() any {
	z, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return z
}}

// gzipped is b compressed, quickly.
func gzipped(b []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(b) / 6)
	z := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(z)
	z.Reset(&out)
	if _, err := z.Write(b); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// renderError writes a page saying why it cannot be shown: the API
// server's own message, with its status (403 for forbidden).
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, c *caller, err error) {
	status := statusOf(err)
	msg := apiMessage(err)
	s.render(w, r, status, "error", &page{Title: http.StatusText(status), User: c.id.Name, Data: errorData{Status: status, Message: msg}})
}

type errorData struct {
	Status  int
	Message string
}

// statusOf is the HTTP status of an error of the API server (403 for
// forbidden, 404 for not found); 502 for another error.
func statusOf(err error) int {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code >= 400 && st.Status().Code < 600 {
		return int(st.Status().Code)
	}
	return http.StatusBadGateway
}

// apiMessage is the API server's own message of err, else err's text.
func apiMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return st.Status().Message
	}
	return err.Error()
}

// The states the overview filters by.
var states = []string{"ready", "notready", "suspended", "drifted", "progressing", "degraded"}

type overviewData struct {
	Rows       []row
	Counts     counts
	Namespaces []string
	NS, Q      string
	State      string
	States     []string
	// Synced is false while the watch has not listed everything yet.
	Synced bool
	// Scope is the one namespace shown when the kubeconfig may not list
	// ManifestSyncs in every namespace.
	Scope string
}

type counts struct {
	Total, Ready, NotReady, Suspended, Drifted int
}

// maxRows bounds the rows of one overview page.
const maxRows = 5000

// overview lists every ManifestSync the user may list, filtered by the
// query: ns, q (a search in namespace, name, reason, message, revision)
// and state.
func (s *Server) overview(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	d := overviewData{NS: q.Get("ns"), Q: strings.TrimSpace(q.Get("q")), State: q.Get("state"), States: states}
	if !slices.Contains(states, d.State) {
		d.State = ""
	}
	all, synced := s.store.list()
	d.Synced = synced
	d.Scope = s.store.watchScope()
	visible := s.visibleNamespaces(r.Context(), c, all)
	search := strings.ToLower(d.Q)
	nsSet := map[string]bool{}
	for i := range all {
		rw := &all[i]
		if !visible(rw.Namespace) {
			continue
		}
		nsSet[rw.Namespace] = true
		if d.NS != "" && rw.Namespace != d.NS {
			continue
		}
		if search != "" && !strings.Contains(rw.text, search) {
			continue
		}
		d.Counts.Total++
		ready := rw.Ready == string(metav1.ConditionTrue)
		if ready {
			d.Counts.Ready++
		} else {
			d.Counts.NotReady++
		}
		if rw.Suspended {
			d.Counts.Suspended++
		}
		if rw.Drifted {
			d.Counts.Drifted++
		}
		if !matchState(rw, ready, d.State) || len(d.Rows) >= maxRows {
			continue
		}
		d.Rows = append(d.Rows, *rw)
	}
	d.Namespaces = slices.Sorted(maps.Keys(nsSet))
	s.render(w, r, http.StatusOK, "overview", &page{Title: "ManifestSyncs", User: c.id.Name, Data: d})
}

func matchState(r *row, ready bool, state string) bool {
	switch state {
	case "ready":
		return ready
	case "notready":
		return !ready
	case "suspended":
		return r.Suspended
	case "drifted":
		return r.Drifted
	case "progressing":
		return r.Health == string(v1alpha1.HealthProgressing)
	case "degraded":
		return r.Health == string(v1alpha1.HealthDegraded)
	}
	return true
}

// visibleNamespaces says which namespaces' ManifestSyncs the user may
// list: every one when they may list them cluster-wide, else those an
// access review allows (the reviews of many namespaces run side by side).
func (s *Server) visibleNamespaces(ctx context.Context, c *caller, rows []row) func(string) bool {
	if s.opts.Mode == ModeLocal || s.allowed(ctx, c.id, "list", "") {
		return func(string) bool { return true }
	}
	var namespaces []string
	for i, r := range rows {
		if i == 0 || rows[i-1].Namespace != r.Namespace {
			namespaces = append(namespaces, r.Namespace)
		}
	}
	ok := make(map[string]bool, len(namespaces))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, ns := range namespaces {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := s.allowed(ctx, c.id, "list", ns)
			mu.Lock()
			ok[ns] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	return func(ns string) bool { return ok[ns] }
}

// msData is what the pages of one ManifestSync show.
type msData struct {
	Tab        string
	NS, Name   string
	URL        string
	Detail     view.Detail
	Health     string
	Conditions []metav1.Condition
	Inputs     []inputRow
	RolledBack bool

	// tree
	Targets []inspect.Target
	YAML    string
	// Note says why part of the page is missing (an error reading it).
	Note string

	// history
	History    []historyRow
	From, To   int
	Compared   bool
	Changes    []inspect.SourceChange
	HistoryLen int

	// events
	Events []inspect.Event

	// diff
	Diffs        []inspect.ObjectDiff
	DiffDisabled bool
}

type inputRow struct {
	Name, Revision, Link string
}

type historyRow struct {
	N        int
	Entry    v1alpha1.HistoryEntry
	Sources  []inputRow
	Current  bool
	Revision string
}

// appliedEntry is the index of the history entry that is applied now, -1
// when none is. A revision can be in the history more than once (A, then
// B, then A again: a rollback, or an in-cluster input changing back; or
// the same revision evaluated again with another output that failed to
// apply), so the entry of status.lastAppliedRevision is the newest one
// with it that synced (the operator sets that revision only on a sync that
// applied every target); else the newest one with it whose result does not
// say the apply failed: under spec.wait an applied entry may read
// Progressing or HealthCheckFailed, and an entry may record no result.
func appliedEntry(s v1alpha1.ManifestSyncStatus) int {
	if s.LastAppliedRevision == "" {
		return -1
	}
	applied := -1
	for i, e := range s.History { // newest first
		if e.Revision != s.LastAppliedRevision {
			continue
		}
		switch e.Result {
		case v1alpha1.ReasonSynced:
			return i
		case "", v1alpha1.ReasonProgressing, v1alpha1.ReasonHealthCheckFailed:
			if applied < 0 {
				applied = i
			}
		}
	}
	return applied
}

// msPage serves one tab of a ManifestSync's page, read as the user: the
// API server's refusal is the page's (403 with its message).
func (s *Server) msPage(tab string) func(http.ResponseWriter, *http.Request, *caller) {
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		s.showMS(w, r, c, tab, http.StatusOK, nil)
	}
}

// showMS renders a tab of the ManifestSync of the request's path, with
// the flash of an action when there is one.
func (s *Server) showMS(w http.ResponseWriter, r *http.Request, c *caller, tab string, status int, fl *flash) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	ms := &v1alpha1.ManifestSync{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
		if fl != nil {
			// The action's outcome still shows above the error.
			p := &page{Title: name, User: c.id.Name, Flash: fl, Self: msURL(ns, name), Data: errorData{Status: statusOf(err), Message: apiMessage(err)}}
			s.render(w, r, status, "error", p)
			return
		}
		s.renderError(w, r, c, err)
		return
	}
	d, err := s.msData(ctx, c, ms, tab, r.URL.Query())
	if err != nil {
		s.renderError(w, r, c, err)
		return
	}
	self := d.URL
	if tab != "tree" {
		self += "/" + tab
		if r.Method == http.MethodGet && r.URL.RawQuery != "" {
			self += "?" + r.URL.RawQuery
		}
	}
	s.render(w, r, status, "ms", &page{Title: ns + "/" + name, User: c.id.Name, Flash: fl, Self: self, Data: d})
}

func (s *Server) msData(ctx context.Context, c *caller, ms *v1alpha1.ManifestSync, tab string, q url.Values) (*msData, error) {
	det, err := view.Describe(ms, len(ms.Status.History))
	if err != nil {
		return nil, fmt.Errorf("ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	d := &msData{Tab: tab, NS: ms.Namespace, Name: ms.Name, URL: msURL(ms.Namespace, ms.Name), Detail: det,
		Health: healthOf(ms), Conditions: ms.Status.Conditions, Inputs: inputRows(ms, ms.Status.Inputs),
		HistoryLen: len(ms.Status.History)}
	_, d.RolledBack = ms.Annotations[history.Annotation]
	switch tab {
	case "tree":
		d.Targets, err = s.tree(ctx, c, ms)
		if err != nil {
			d.Note = apiMessage(err)
		}
	case "history":
		current := appliedEntry(ms.Status)
		for i, e := range ms.Status.History {
			d.History = append(d.History, historyRow{N: i, Entry: e, Sources: inputRows(ms, e.Inputs),
				Current: i == current, Revision: v1alpha1.ShortRevision(e.Revision)})
		}
		from, errF := strconv.Atoi(q.Get("from"))
		to, errT := strconv.Atoi(q.Get("to"))
		if errF == nil && errT == nil && from >= 0 && to >= 0 && from < len(ms.Status.History) && to < len(ms.Status.History) {
			d.From, d.To, d.Compared = from, to, true
			d.Changes, err = s.changes(ctx, c, ms, from, to)
			if err != nil {
				d.Note = apiMessage(err)
			}
		} else {
			d.From, d.To = min(1, max(len(ms.Status.History)-1, 0)), 0
		}
	case "events":
		d.Events, err = s.events(ctx, c, ms)
		if err != nil {
			d.Note = apiMessage(err)
		}
	case "diff":
		if s.opts.Evaluator == nil {
			d.DiffDisabled = true
			break
		}
		d.Diffs, err = s.diff(ctx, c, ms)
		if err != nil {
			d.Note = apiMessage(err)
		}
	}
	return d, nil
}

// commitPattern finds the commit of a git revision ("main@sha1:H").
var commitPattern = regexp.MustCompile(`(?:^|@)sha1:([0-9a-f]{7,40})$`)

// inputRows are the sources of in with, for a git source of a known forge,
// a link to the commit.
func inputRows(ms *v1alpha1.ManifestSync, in *v1alpha1.Inputs) []inputRow {
	if in == nil {
		return nil
	}
	urls := map[string]string{}
	for _, src := range ms.Spec.Sources {
		if src.Git != nil {
			urls[src.Name] = src.Git.URL
		}
	}
	var rows []inputRow
	for _, name := range slices.Sorted(maps.Keys(in.Sources)) {
		rev := in.Sources[name]
		ir := inputRow{Name: name, Revision: rev}
		if m := commitPattern.FindStringSubmatch(rev); m != nil {
			ir.Link = commitLink(urls[name], m[1])
		}
		rows = append(rows, ir)
	}
	for _, p := range []struct{ k, v string }{{"transform", in.Transform}, {"schemas", in.Schemas}, {"params", in.Params}} {
		if p.v != "" {
			rows = append(rows, inputRow{Name: "(" + p.k + ")", Revision: p.v})
		}
	}
	return rows
}

// commitLink is the web page of commit in the repository of a git URL on
// GitHub, GitLab, Codeberg or Bitbucket; "" for another host.
func commitLink(repoURL, commit string) string {
	u := strings.TrimSpace(repoURL)
	// scp-like: git@github.com:owner/repo.git
	if i := strings.Index(u, "@"); i >= 0 && !strings.Contains(u, "://") {
		if host, path, ok := strings.Cut(u[i+1:], ":"); ok {
			u = "https://" + host + "/" + path
		}
	}
	parsed, err := url.Parse(u)
	if err != nil || parsed.Host == "" {
		return ""
	}
	host := strings.ToLower(parsed.Hostname())
	path := strings.TrimSuffix(strings.Trim(parsed.Path, "/"), ".git")
	if path == "" || strings.Contains(path, "..") {
		return ""
	}
	base := "https://" + host + "/" + path
	switch host {
	case "github.com", "codeberg.org":
		return base + "/commit/" + commit
	case "gitlab.com":
		return base + "/-/commit/" + commit
	case "bitbucket.org":
		return base + "/commits/" + commit
	}
	return ""
}

// tree is the targets with their objects, read live as the user.
func (s *Server) tree(ctx context.Context, c *caller, ms *v1alpha1.ManifestSync) ([]inspect.Target, error) {
	return inspect.Tree(ctx, c.client, ms)
}

// changes lists the files changed between two history entries, fetched
// as the user.
func (s *Server) changes(ctx context.Context, c *caller, ms *v1alpha1.ManifestSync, from, to int) ([]inspect.SourceChange, error) {
	select {
	case s.diffs <- struct{}{}:
		defer func() { <-s.diffs }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for other comparisons to end: %w", ctx.Err())
	}
	return inspect.Changes(ctx, c.client, ms, from, to, inspect.ChangesOptions{})
}

// events are the events of the ManifestSync and of its objects, newest
// first.
func (s *Server) events(ctx context.Context, c *caller, ms *v1alpha1.ManifestSync) ([]inspect.Event, error) {
	targets, err := inspect.Tree(ctx, c.client, ms)
	if err != nil {
		return nil, err
	}
	return inspect.Events(ctx, c.client, ms, targets)
}

// diff is what a sync would change now, as the user's dry run.
// At most maxDiffs run at once (each evaluates and dry-runs every
// object); the others wait their turn or their request's end.
func (s *Server) diff(ctx context.Context, c *caller, ms *v1alpha1.ManifestSync) ([]inspect.ObjectDiff, error) {
	select {
	case s.diffs <- struct{}{}:
		defer func() { <-s.diffs }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for other diffs to end: %w", ctx.Err())
	}
	return inspect.Diff(ctx, c.client, ms, s.opts.Evaluator, s.opts.InstanceID)
}
