package w11

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/operator/view"
)

func TestServerTiming(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   time.Duration
		ok     bool
	}{
		{[]string{"app;dur=12.5"}, 12500 * time.Microsecond, true},
		{[]string{`db;dur=3, app;desc="render";dur=0.25`}, 250 * time.Microsecond, true},
		{[]string{"db;dur=3", "app; dur=7"}, 7 * time.Millisecond, true},
		{[]string{"application;dur=3"}, 0, false},
		{[]string{"app"}, 0, false},
		{[]string{"app;dur=-1"}, 0, false},
		{nil, 0, false},
	} {
		got, ok := serverTiming(tc.values, "app")
		if got != tc.want || ok != tc.ok {
			t.Errorf("serverTiming(%q) = %v, %v; want %v, %v", tc.values, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadEvents(t *testing.T) {
	in := ": connected\nretry: 1000\n\nevent: change\ndata: {\"kind\":\"ManifestSync\",\n data:x\ndata: \"name\":\"a\"}\n\ndata: plain\n\nevent: change\ndata: last\n\n"
	var got []string
	if err := readEvents(strings.NewReader(in), func(ev sseEvent) bool {
		got = append(got, ev.typ+"="+ev.data)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// The unknown field " data" is skipped, as EventSource skips it.
	want := []string{"change={\"kind\":\"ManifestSync\",\n\"name\":\"a\"}", "message=plain", "change=last"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestParseWatches(t *testing.T) {
	raw := `# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_longrunning_requests{component="apiserver",group="manifestsync.dev",resource="manifestsyncs",scope="cluster",subresource="",verb="WATCH",version="v1alpha1"} 1
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 2
# TYPE apiserver_registered_watchers gauge
apiserver_registered_watchers{group="",kind="ConfigMap",version="v1"} 4
`
	w, err := parseWatches([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if w.longrunning != 4 || w.registered != 4 {
		t.Errorf("watches %+v, want 4 long-running WATCH and 4 registered", w)
	}
	w, err = parseWatches([]byte("# TYPE apiserver_longrunning_requests gauge\napiserver_longrunning_requests{verb=\"WATCH\"} 2\n"))
	if err != nil || w.longrunning != 2 || w.registered != -1 {
		t.Errorf("without registered watchers: %+v, %v; want 2 and -1", w, err)
	}
	if _, err := parseWatches([]byte("# TYPE other gauge\nother 1\n")); err == nil {
		t.Error("metrics without apiserver_longrunning_requests: no error")
	}
}

// The workload's HTTP side against a stand-in of the UI server that
// follows the contract (rows, Server-Timing, event streams): the page's
// figures are read and every stream sees the change.
func TestPagesAndStreams(t *testing.T) {
	ctx := context.Background()
	subscribe := make(chan chan string, nStreams)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server-Timing", "app;dur=4.5")
		for i := range 3 {
			fmt.Fprintf(w, `<tr data-ms="ns/%s" data-ready="True">`, msName(i))
		}
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		ch := make(chan string, 1)
		subscribe <- ch
		select {
		case data := <-ch:
			fmt.Fprintf(w, ": ping\n\nevent: change\ndata: %s\n\n", data)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
		}
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	hc := srv.Client()
	if err := waitListed(ctx, hc, srv.URL, 3); err != nil {
		t.Fatal(err)
	}
	p, err := get(ctx, hc, srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if p.server != 4500*time.Microsecond || rowsOf(p.body) != 3 || p.client <= 0 {
		t.Errorf("page: server %v, %d rows, client %v; want 4.5ms, 3 rows and a time", p.server, rowsOf(p.body), p.client)
	}

	st, err := openStreams(ctx, srv.URL, nStreams, "bench-w11-01", "app-0001")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	for i := range nStreams {
		ch := <-subscribe
		if i%2 == 0 { // another ManifestSync's change first: not counted
			ch <- `{"kind":"ManifestSync","namespace":"bench-w11-01","name":"app-0002"}`
			continue
		}
		ch <- `{"kind":"ManifestSync","namespace":"bench-w11-01","name":"app-0001"}`
	}
	seen, last := st.waitSeen(nStreams, time.Second)
	if seen != nStreams/2 || last.IsZero() {
		t.Errorf("%d streams saw the change (last at %v), want %d", seen, last, nStreams/2)
	}
}

// A stream endpoint that answers with something else than an event stream
// fails the workload with what it answered.
func TestStreamRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	_, err := openStreams(context.Background(), srv.URL, 3, "ns", "name")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("openStreams = %v, want the 401", err)
	}
}

// The fleet's ManifestSyncs and statuses pass the CRD's validation on a
// real API server, and read as the overview's states: one of each kind
// the workload spreads.
func TestFleetOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c, err := harness.StartCluster(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 60 // holds one of each state
	if err := populate(ctx, cl, n); err != nil {
		t.Fatal(err)
	}
	if err := touch(ctx, cl, 1, 0); err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.ManifestSyncList
	if err := cl.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d ManifestSyncs, want %d", len(list.Items), n)
	}
	counts := map[string]int{}
	for i := range list.Items {
		ms := &list.Items[i]
		s := view.Summarize(ms)
		d, err := view.Describe(ms, historyLen)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.History) != historyLen || len(d.Targets) != 1 || len(d.Targets[0].Objects) != objectsPer || s.Revision == "" {
			t.Fatalf("%s/%s: %d history entries, targets %+v, revision %q", ms.Namespace, ms.Name, len(d.History), d.Targets, s.Revision)
		}
		counts["ready="+s.Ready]++
		counts["health="+d.Targets[0].Health]++
		if s.Suspended {
			counts["suspended"]++
		}
		for _, o := range d.Targets[0].Objects {
			counts["object="+o.State]++
		}
	}
	// Of 60: 3 failing (their target keeps its health), 3 progressing,
	// 3 degraded, 2 suspended, 2 with a drifted object.
	want := map[string]int{"ready=True": 57, "ready=False": 3, "health=Healthy": 54, "health=Progressing": 3, "health=Degraded": 3,
		"suspended": 2, "object=Synced": objectsPer*n - 2, "object=Drifted": 2}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("states %v, want %v", counts, want)
	}
	var ms v1alpha1.ManifestSync
	if err := cl.Get(ctx, client.ObjectKey{Namespace: nsName(1), Name: msName(1)}, &ms); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(view.Summarize(&ms).Message, "(resync 0)") {
		t.Errorf("after touch, Ready says %q", view.Summarize(&ms).Message)
	}
	// The API server this workload reads exports the watch gauge.
	w, err := readWatches(ctx, c.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("API server watches: %+v", w)
}
