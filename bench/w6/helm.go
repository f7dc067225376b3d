package w6

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
)

// W10 is Helm at scale (issue 26): 1,000 ManifestSyncs, each of one helm
// source (a small chart of a ConfigMap, a headless Service (the test
// control plane's service range has no 1,000 addresses) and a Deployment, from a
// Helm repository served over loopback HTTP by the benchmark itself),
// created before `engine operator` starts. Measured: the time from its
// start until every ManifestSync is Ready at its generation, its peak
// resident set (with its evaluation workers'), and how many times the
// chart archive and the repository index were downloaded (the server's own
// count: the chart cache is to make the second to thousandth render
// download nothing). Beside them, the figures Flux publishes for its
// helm-controller with 1,000 HelmReleases (fluxcd/flux-benchmark
// RESULTS.md: 8m12s and 400 MiB), a published figure, not one measured
// here: Flux's controllers are not run by this benchmark.
const (
	w10Workload = "W10 helm"
	w10Syncs    = 1000
	w10NS       = "bench-w10"
	w10Label    = "bench.manifestsync.dev/w10"
	w10Chart    = "w10"
	w10Version  = "0.1.0"

	// fluxHelmSeconds and fluxHelmMiB are flux-benchmark's published
	// figures for 1,000 HelmReleases.
	fluxHelmSeconds = 8*60 + 12
	fluxHelmMiB     = 400

	w10Timeout = 10 * time.Minute
)

func w10Name(i int) string { return fmt.Sprintf("app-%04d", i) }

// w10Files are the chart's files: every object carries the release's name,
// so that the 1,000 releases of one namespace do not collide.
var w10Files = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: " + w10Chart + "\nversion: " + w10Version + "\ntype: application\n",
	"values.yaml": "replicas: 1\nimage: registry.example/app:1.0\nport: 8080\ngreeting: hello\n",
	"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
  labels:
    ` + w10Label + `: "true"
    app.kubernetes.io/instance: {{ .Release.Name }}
data:
  greeting: {{ .Values.greeting | quote }}
`,
	"templates/service.yaml": `apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
  labels:
    ` + w10Label + `: "true"
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  clusterIP: None
  selector:
    app.kubernetes.io/instance: {{ .Release.Name }}
  ports:
  - port: {{ .Values.port }}
`,
	"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels:
    ` + w10Label + `: "true"
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      containers:
      - name: app
        image: {{ .Values.image }}
        ports:
        - containerPort: {{ .Values.port }}
`,
}

// chartRepo is a Helm repository on loopback: index.yaml and one chart
// archive, answering conditional requests, counting what it sends.
type chartRepo struct {
	srv      *http.Server
	url      string
	index    []byte
	archive  []byte
	modified time.Time
	// charts and indexes count the full downloads (200s), revalidated
	// the conditional ones answered 304.
	charts, indexes, revalidated atomic.Int64
}

func startChartRepo() (*chartRepo, error) {
	archive, err := chartArchive(w10Chart, w10Files)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &chartRepo{url: "http://" + ln.Addr().String(), archive: archive, modified: time.Now().Add(-time.Hour).Truncate(time.Second)}
	sum := sha256.Sum256(archive)
	r.index = fmt.Appendf(nil, `apiVersion: v1
entries:
  %s:
  - apiVersion: v2
    name: %s
    version: %s
    type: application
    created: %q
    digest: %s
    urls:
    - %s/%s-%s.tgz
generated: %q
`, w10Chart, w10Chart, w10Version, r.modified.Format(time.RFC3339), hex.EncodeToString(sum[:]), r.url, w10Chart, w10Version, r.modified.Format(time.RFC3339))
	etag := fmt.Sprintf(`"%x"`, sha256.Sum256(r.index))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /index.yaml", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("ETag", etag)
		cw := &codeWriter{ResponseWriter: w}
		http.ServeContent(cw, req, "index.yaml", r.modified, bytes.NewReader(r.index))
		r.count(cw.code, &r.indexes)
	})
	mux.HandleFunc("GET /"+w10Chart+"-"+w10Version+".tgz", func(w http.ResponseWriter, req *http.Request) {
		cw := &codeWriter{ResponseWriter: w}
		http.ServeContent(cw, req, "chart.tgz", r.modified, bytes.NewReader(r.archive))
		r.count(cw.code, &r.charts)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln) //nolint:errcheck // ends with Close
	return r, nil
}

func (r *chartRepo) count(code int, full *atomic.Int64) {
	switch code {
	case http.StatusOK, 0:
		full.Add(1)
	case http.StatusNotModified:
		r.revalidated.Add(1)
	}
}

// codeWriter remembers the status code written.
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// chartArchive packs files as `helm package` does: a gzipped tar whose
// entries are under the chart's name.
func chartArchive(name string, files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range []string{"Chart.yaml", "values.yaml", "templates/configmap.yaml", "templates/service.yaml", "templates/deployment.yaml"} {
		body := files[p]
		hdr := &tar.Header{Name: name + "/" + p, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RunHelm measures W10 on c, rounds times (at least 3).
func RunHelm(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, error) {
	dir, err := os.MkdirTemp("", "bench-w10-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b, err := newBench(ctx, c, dir, w10NS, "", w10Syncs, false)
	if err != nil {
		return nil, fmt.Errorf("w10: %w", err)
	}
	repo, err := startChartRepo()
	if err != nil {
		return nil, fmt.Errorf("w10: %w", err)
	}
	defer repo.srv.Close()
	if err := b.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w10NS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("w10: %w", err)
	}
	var ready, charts, indexes []float64
	round := 0
	ours := func() (float64, error) {
		round++
		if err := b.resetHelm(ctx); err != nil {
			return 0, err
		}
		if err := b.createHelmSyncs(ctx, repo.url); err != nil {
			return 0, err
		}
		c0, i0 := repo.charts.Load(), repo.indexes.Load()
		args := append([]string{"operator", "--kubeconfig", b.c.Kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", harness.TrustAll}, OperatorFlags...)
		rss, took, err := b.measure(ctx, exec.Command(b.engine, args...), fmt.Sprintf("operator-w10-%d.log", round), b.waitAllReady, nil, 0)
		if err != nil {
			return 0, err
		}
		ready = append(ready, took.Seconds())
		charts = append(charts, float64(repo.charts.Load()-c0))
		indexes = append(indexes, float64(repo.indexes.Load()-i0))
		return rss, nil
	}
	runs, err := harness.Rounds(rounds, ours)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("w10: %w", err), b.resetHelm(ctx))
	}
	published := "Flux helm-controller, 1,000 HelmReleases (published: fluxcd/flux-benchmark RESULTS.md, not run here)"
	// The published figures stand beside every round.
	fluxSeconds, fluxMiB := make([]float64, len(ready)), make([]float64, len(ready))
	for i := range ready {
		fluxSeconds[i], fluxMiB[i] = fluxHelmSeconds, fluxHelmMiB
	}
	timeRow := harness.Compare(w10Workload, fmt.Sprintf("start → all %d ManifestSyncs Ready (one chart each, %d objects)", w10Syncs, 3*w10Syncs), "s",
		ready, fluxSeconds, published, "< 1× Flux", func(q float64) bool { return q < 1 })
	rss := harness.Compare(w10Workload, "peak RSS (operator + eval workers)", "MiB", runs[0], fluxMiB, published, "< 1× Flux", func(q float64) bool { return q < 1 })
	reported := func(float64) bool { return true }
	own := harness.Absolute(w10Workload, "peak RSS of the operator's own process (file-backed pages of its executable included)", "MiB", b.own, "reported", reported)
	kids := harness.Absolute(w10Workload, "peak RSS of its evaluation workers together (charts are rendered there)", "MiB", b.kids, "reported", reported)
	anon := harness.Absolute(w10Workload, "peak anonymous memory (RssAnon, operator + eval workers)", "MiB", b.anon[0], "reported", reported)
	pss := harness.Compare(w10Workload, "peak proportional set size (Pss, operator + eval workers: the pages of an executable the processes share counted once, as a pod's memory counts them)", "MiB", b.pss[0], fluxMiB, published, "reported", nil)
	own.Reported, kids.Reported, anon.Reported = true, true, true
	downloads := harness.Absolute(w10Workload, fmt.Sprintf("chart downloads for %d renders (counted by the repository)", w10Syncs), "", charts, "= 1", func(v float64) bool { return v == 1 })
	idx := harness.Absolute(w10Workload, fmt.Sprintf("index downloads for %d ManifestSyncs of one repository", w10Syncs), "", indexes, "reported", reported)
	idx.Reported = true
	if !downloads.Pass {
		downloads.Note = fmt.Sprintf("the repository sent the chart archive %v times over the rounds (each round a fresh operator with an empty cache)", charts)
	}
	rows := []harness.Row{timeRow, rss, pss, own, kids, anon, downloads, idx}
	return rows, b.resetHelm(ctx)
}

// createHelmSyncs creates the 1,000 ManifestSyncs, each rendering the
// chart of the repository at url into the namespace, under its own name.
func (b *bench) createHelmSyncs(ctx context.Context, url string) error {
	return harness.Parallel(w10Syncs, setupWorker, func(i int) error {
		ms := &v1alpha1.ManifestSync{
			ObjectMeta: metav1.ObjectMeta{Namespace: w10NS, Name: w10Name(i), Labels: map[string]string{w10Label: "true"}},
			Spec: v1alpha1.ManifestSyncSpec{
				Sources: []v1alpha1.Source{{Name: "app", Helm: &v1alpha1.HelmSource{Chart: w10Chart, Version: "0.1.x", Repository: url, Insecure: true}}},
				Targets: []v1alpha1.Target{{Name: "here", Namespace: w10NS}},
			},
		}
		return b.client.Create(ctx, ms)
	})
}

// waitAllReady waits until every ManifestSync of the workload is Ready at
// its generation, watching them.
func (b *bench) waitAllReady(ctx context.Context) error {
	var list v1alpha1.ManifestSyncList
	w, err := b.client.Watch(ctx, &list, client.InNamespace(w10NS), client.HasLabels{w10Label})
	if err != nil {
		return err
	}
	defer w.Stop()
	done := map[string]bool{}
	last := "no status"
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d ManifestSyncs Ready (last: %s): %w", len(done), w10Syncs, last, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the ManifestSyncs ended")
			}
			ms, isMS := ev.Object.(*v1alpha1.ManifestSync)
			if !isMS || ev.Type == watch.Deleted {
				continue
			}
			c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady)
			if c != nil && c.Status == metav1.ConditionTrue && ms.Status.ObservedGeneration == ms.Generation {
				done[ms.Name] = true
			} else if c != nil {
				last = fmt.Sprintf("%s: %s %s: %s", ms.Name, c.Status, c.Reason, c.Message)
			}
			if len(done) == w10Syncs {
				return nil
			}
		}
	}
}

// resetHelm deletes the ManifestSyncs (without their finalizers: no
// operator runs) and the objects they made.
func (b *bench) resetHelm(ctx context.Context) error {
	err := harness.Parallel(w10Syncs, setupWorker, func(i int) error {
		return b.deleteSync(ctx, types.NamespacedName{Namespace: w10NS, Name: w10Name(i)})
	})
	if err != nil {
		return err
	}
	sel := []client.DeleteAllOfOption{client.InNamespace(w10NS), client.HasLabels{w10Label}}
	return errors.Join(
		client.IgnoreNotFound(b.client.DeleteAllOf(ctx, &corev1.ConfigMap{}, sel...)),
		client.IgnoreNotFound(b.client.DeleteAllOf(ctx, &appsv1.Deployment{}, sel...)),
		b.deleteServices(ctx),
	)
}

// deleteServices deletes the workload's Services one by one (Services
// have no delete-collection).
func (b *bench) deleteServices(ctx context.Context) error {
	var list corev1.ServiceList
	if err := b.client.List(ctx, &list, client.InNamespace(w10NS), client.HasLabels{w10Label}); err != nil {
		return err
	}
	return harness.Parallel(len(list.Items), setupWorker, func(i int) error {
		return client.IgnoreNotFound(b.client.Delete(ctx, &list.Items[i]))
	})
}
