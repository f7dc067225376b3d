package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/httpsrc"
	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// noteRecorder keeps the notes of the events an operator of its own
// records, as the API server would show them, for tests that check what
// events must never say.
type noteRecorder struct {
	mu    sync.Mutex
	notes []string
}

func (r *noteRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, reason+": "+fmt.Sprintf(note, args...))
}

func (r *noteRecorder) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r *noteRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.notes, "\n")
}

// sourceOperator runs an operator of its own on the second API server
// with the oci and http caches given, their sweepers every second, its
// events kept by the recorder it returns.
func sourceOperator(t *testing.T, ociCache *oci.Cache, httpCache *httpsrc.Cache) *noteRecorder {
	t.Helper()
	events := &noteRecorder{}
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Recorder = events
		if ociCache != nil {
			r.OCI = ociCache.Provider
			if err := mgr.Add(OCISweeper(ociCache, mgr.GetClient(), time.Second)); err != nil {
				return err
			}
		}
		if httpCache != nil {
			r.HTTP = httpCache.Provider
			return mgr.Add(HTTPSweeper(httpCache, mgr.GetClient(), time.Second))
		}
		return nil
	})
	return events
}

// pushArtifact publishes files as `engine push` does and returns the
// manifest's digest.
func pushArtifact(t *testing.T, host, repoTag string, files map[string]string, dockerConfig []byte) string {
	t.Helper()
	d := &oci.Dir{Files: map[string][]byte{}}
	for p, s := range files {
		d.Files[p] = []byte(s)
	}
	digest, err := oci.Push(context.Background(), d, "oci://"+host+"/"+repoTag, oci.PushOptions{Insecure: true, DockerConfigJSON: dockerConfig})
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// registryRequests counts the requests of a registry's access log after
// mark (a length of the log) by method and kind: "HEAD manifests",
// "GET blobs", "GET tags".
func registryRequests(t *testing.T, r *registrytest.Registry, mark int) map[string]int {
	t.Helper()
	line := regexp.MustCompile(`"(GET|HEAD|PUT|POST|PATCH) /v2/\S+/(manifests|blobs|tags)/`)
	counts := map[string]int{}
	for _, m := range line.FindAllStringSubmatch(r.Log(t)[mark:], -1) {
		counts[m[1]+" "+m[2]]++
	}
	return counts
}

// cmOf is a ConfigMap manifest with one data entry.
func cmOf(name, key, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  %s: %q\n", name, key, value)
}

// A ManifestSync with an oci source syncs the artifact `engine push`
// published: its path is a kustomization built in the whole artifact (an
// overlay naming ../base) and substituted, as a git source's; the input
// revision is TAG@sha256:DIGEST. Polls of an unchanged artifact download
// no blob and no manifest (the registry's access log); a new tag within
// the semver range is applied at the next poll.
func TestOCISourceSyncs(t *testing.T) {
	env.Need(t)
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	cache := NewOCICache(oci.CacheOptions{Limits: oci.Limits{Timeout: 20 * time.Second}})
	sourceOperator(t, cache, nil)
	artifact := func(version string) map[string]string {
		return map[string]string{
			"deploy/kustomization.yaml": "resources: [cm.yaml, ../base]\n",
			"deploy/cm.yaml":            cmOf("app", "version", version),
			"base/kustomization.yaml":   "resources: [greeting.yaml]\n",
			"base/greeting.yaml":        cmOf("greeting", "text", "${greeting}"),
			"other/ignored.yaml":        cmOf("ignored", "x", "y"),
		}
	}
	d1 := pushArtifact(t, reg.Addr, "app:1.0.0", artifact("1"), nil)
	ns := remoteEnv.Namespace(t, nil)
	ms := newSync(ns, "oci", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "app", OCI: &v1alpha1.OCISource{
			URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{SemVer: ">=1.0.0 <2"}, Insecure: true, Path: "deploy",
			Build: v1alpha1.Build{Substitute: map[string]string{"greeting": "hello"}},
		}}},
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Second},
	})
	ctx := context.Background()
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(ms)
	got := remoteEnv.WaitForReason(t, key, v1alpha1.ReasonSynced, time.Minute)
	if rev := got.Status.Inputs.Sources["app"]; rev != "1.0.0@"+d1 {
		t.Fatalf("input revision %q, want 1.0.0@%s", rev, d1)
	}
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, cm); err != nil || cm.Data["version"] != "1" {
		t.Fatalf("the artifact's ConfigMap: %v, %v", cm.Data, err)
	}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "greeting"}, cm); err != nil || cm.Data["text"] != "hello" {
		t.Fatalf("the base's ConfigMap, substituted: %v, %v", cm.Data, err)
	}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ignored"}, cm); err == nil {
		t.Fatal("a file outside the path was applied")
	}

	// Unchanged polls: a tag listing and a manifest HEAD each, no blob.
	mark := len(reg.Log(t))
	_, unchanged, _, _ := cache.Stats()
	testenv.Eventually(t, time.Minute, func() error {
		if _, u, _, _ := cache.Stats(); u < unchanged+3 {
			return errors.New("fewer than 3 unchanged polls")
		}
		return nil
	})
	if got := registryRequests(t, reg, mark); got["GET blobs"] != 0 || got["GET manifests"] != 0 || got["HEAD manifests"] < 3 {
		t.Fatalf("unchanged polls asked the registry for %v; want manifest HEADs and tag listings only", got)
	}
	if n := counterValue(ociFetchesTotal.WithLabelValues(ns, "oci", "app", "success")); n < 4 {
		t.Errorf("manifestsync_oci_fetches_total{result=success} is %v after 4 reads", n)
	}

	// A new version within the range, and one outside it.
	pushArtifact(t, reg.Addr, "app:2.0.0", artifact("2.0.0"), nil)
	d11 := pushArtifact(t, reg.Addr, "app:1.1.0", artifact("1.1"), nil)
	testenv.Eventually(t, time.Minute, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		if rev := cur.Status.Inputs.Sources["app"]; rev != "1.1.0@"+d11 {
			return errors.New("input revision " + rev)
		}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, cm); err != nil {
			return err
		}
		if cm.Data["version"] != "1.1" {
			return fmt.Errorf("version %q", cm.Data["version"])
		}
		return nil
	})

	// Once no ManifestSync names the artifact, the sweeper lets it go.
	if err := remoteEnv.Client.Delete(ctx, ms); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if _, _, bytes, entries := cache.Stats(); entries != 0 || bytes != 0 {
			return fmt.Errorf("%d artifacts, %d bytes held", entries, bytes)
		}
		return nil
	})
}

// What a hostile or wrong registry gets: a wrong password is SourceFailed
// naming the source and the registry, the password in no status, event or
// log line; an artifact whose tar holds ../ is SourceFailed naming the
// entry, nothing of it applied, the objects of the last good artifact kept.
func TestOCISourceFailures(t *testing.T) {
	env.Need(t)
	const user, password = "robot", "oci-pw-40417"
	reg := registrytest.StartWith(t, registrytest.Config{User: user, Password: password})
	config := func(pw string) []byte {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
		b, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Addr: map[string]string{"auth": auth}}})
		return b
	}
	cache := NewOCICache(oci.CacheOptions{Limits: oci.Limits{Timeout: 20 * time.Second}})
	events := sourceOperator(t, cache, nil)
	ctx := context.Background()
	ns := remoteEnv.Namespace(t, nil)
	for secret, pw := range map[string]string{"right": password, "wrong": "oci-wrong-pw-77120"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: config(pw)}}
		if err := remoteEnv.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	pushArtifact(t, reg.Addr, "app:good", map[string]string{"cm.yaml": cmOf("app", "state", "good")}, config(password))
	create := func(name, secret, tag string) *v1alpha1.ManifestSync {
		t.Helper()
		ms := newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", OCI: &v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: tag},
				Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: secret}}}},
			Targets:  targets(ns),
			Interval: &metav1.Duration{Duration: time.Second},
		})
		if err := remoteEnv.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}

	wrong := create("wrong", "wrong", "good")
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(wrong), v1alpha1.ReasonSourceFailed, time.Minute)
	msg := condition(got, v1alpha1.ConditionReady).Message
	if !strings.Contains(msg, `source "app"`) || !strings.Contains(msg, reg.Addr) || !strings.Contains(msg, "unauthorized") {
		t.Fatalf("wrong password: %q; want the source, the registry and unauthorized", msg)
	}
	t.Logf("wrong password: %s", msg)

	good := create("good", "right", "good")
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(good), v1alpha1.ReasonSynced, time.Minute)
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, cm); err != nil || cm.Data["state"] != "good" {
		t.Fatalf("the good artifact's ConfigMap: %v, %v", cm.Data, err)
	}
	// The tag now names a tar that writes out of its directory, beside an
	// object that would be applied.
	writeHostile(t, reg.Addr+"/app:good", config(password),
		map[string]string{"cm.yaml": cmOf("app", "state", "hostile"), "extra.yaml": cmOf("extra", "state", "hostile"), "../../escape.yaml": cmOf("escape", "x", "y")})
	testenv.Eventually(t, time.Minute, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(good), cur); err != nil {
			return err
		}
		c := condition(cur, v1alpha1.ConditionReady)
		if c.Reason != v1alpha1.ReasonSourceFailed || !strings.Contains(c.Message, `"../../escape.yaml"`) {
			return fmt.Errorf("ready: %s %q", c.Reason, c.Message)
		}
		t.Logf("a tar with ../: %s", c.Message)
		return nil
	})
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, cm); err != nil || cm.Data["state"] != "good" {
		t.Fatalf("after a hostile artifact, the last good ConfigMap: %v, %v", cm.Data, err)
	}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "extra"}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("an object of the hostile artifact was applied")
	}

	// The password is nowhere: status, events, logs.
	for _, ms := range []*v1alpha1.ManifestSync{wrong, good} {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			t.Fatal(err)
		}
		status, _ := json.Marshal(cur.Status)
		for where, text := range map[string]string{"status": string(status), "events": events.String(), "logs": operatorLogs.String()} {
			for _, leak := range []string{password, "oci-wrong-pw-77120", base64.StdEncoding.EncodeToString([]byte(user + ":" + password))} {
				if strings.Contains(text, leak) {
					t.Errorf("%s: %s shows a credential", ms.Name, where)
				}
			}
		}
	}
	if !strings.Contains(events.String(), reg.Addr) {
		t.Errorf("no event names the registry: %s", events.String())
	}
}

// What registries that accept requests and never answer get: their
// ManifestSyncs fail SourceFailed (fetch in progress, then the timeout)
// naming the source and registry, holding no worker: a fresh ManifestSync
// of a good registry is Ready within 5 s beside them.
func TestOCIBystanderIsolation(t *testing.T) {
	env.Need(t)
	const fetchTimeout = 10 * time.Second
	cache := NewOCICache(oci.CacheOptions{Limits: oci.Limits{Timeout: fetchTimeout}})
	sourceOperator(t, cache, nil)
	ns := remoteEnv.Namespace(t, nil)
	create := func(name, host string) *v1alpha1.ManifestSync {
		t.Helper()
		ms := newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", OCI: &v1alpha1.OCISource{URL: "oci://" + host + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true}}},
			Targets: targets(ns),
		})
		if err := remoteEnv.Client.Create(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	stop := make(chan struct{})
	var stuck []*v1alpha1.ManifestSync
	for i := range 4 {
		silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}))
		t.Cleanup(silent.Close)
		stuck = append(stuck, create(fmt.Sprintf("silent-%d", i), strings.TrimPrefix(silent.URL, "http://")))
	}
	t.Cleanup(func() { close(stop) }) // before the servers close
	reg := registrytest.Start(t)
	pushArtifact(t, reg, "app:1", map[string]string{"cm.yaml": cmOf("fresh", "a", "b")}, nil)
	start := time.Now()
	fresh := create("fresh", reg)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(fresh), v1alpha1.ReasonSynced, time.Minute)
	took := time.Since(start)
	t.Logf("a fresh ManifestSync was Ready %v after it was created with four on silent registries", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the fresh ManifestSync was Ready %v after it was created; want within 5s", took.Round(time.Millisecond))
	}
	for _, ms := range stuck {
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSourceFailed, 3*fetchTimeout)
		msg := condition(got, v1alpha1.ConditionReady).Message
		if !strings.Contains(msg, `source "app"`) || !strings.Contains(msg, "oci://127.0.0.1:") {
			t.Errorf("%s: %q; want the source and the registry", ms.Name, msg)
		}
		if n := counterValue(ociFetchesTotal.WithLabelValues(ns, ms.Name, "app", "pending")); n < 1 {
			t.Errorf("%s: manifestsync_oci_fetches_total{result=pending} is %v", ms.Name, n)
		}
	}
	t.Logf("a silent registry: %s", condition(remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(stuck[0]), v1alpha1.ReasonSourceFailed, time.Second), v1alpha1.ConditionReady).Message)
}

// writeHostile pushes to ref (HOST/REPO:TAG) an artifact in Flux's layout
// whose tar holds the entries given as they are, ../ and all.
func writeHostile(t *testing.T, ref string, dockerConfig []byte, entries map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for p, body := range entries {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(len(body)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), oci.FluxConfigMediaType)
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(buf.Bytes(), oci.FluxContentMediaType)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(dockerConfig, &cfg); err != nil {
		t.Fatal(err)
	}
	var opts []remote.Option
	for _, a := range cfg.Auths {
		dec, _ := base64.StdEncoding.DecodeString(a.Auth)
		u, p, _ := strings.Cut(string(dec), ":")
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: u, Password: p}))
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatal(err)
	}
}

// The result label of an oci or http read says why it failed, from the
// error values of package oci (which httpsrc's are).
func TestOCIFetchResult(t *testing.T) {
	for err, want := range map[error]string{
		nil:                                              "success",
		&source.PendingError{}:                           "pending",
		fmt.Errorf("x: %w", oci.ErrUnauthorized):         "unauthorized",
		fmt.Errorf("x: %w", oci.ErrNotFound):             "not_found",
		fmt.Errorf("x: %w", httpsrc.ErrRefused):          "refused",
		fmt.Errorf("x: %w", oci.ErrLimit):                "limit",
		&source.VerifyError{Err: errors.New("unsigned")}: "verify_failed",
		fmt.Errorf("x: %w", context.DeadlineExceeded):    "timeout",
		errors.New("other"):                              "error",
	} {
		if got := ociFetchResult(err); got != want {
			t.Errorf("%v: %q, want %q", err, got, want)
		}
	}
}
