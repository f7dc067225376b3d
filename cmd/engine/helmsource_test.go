package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/helm/helmtest"
)

// TestEvalHelm evaluates a ManifestSync whose chart is fetched from a chart
// repository on 127.0.0.1 with the credentials of the Secret beside the
// sync file, as eval and vet do it: the second run asks the repository one
// conditional request (304) and downloads nothing; a local copy beside the
// sync file, and --source, replace the fetch and say so.
func TestEvalHelm(t *testing.T) {
	repo := helmtest.NewRepo(t)
	// Charts of their own (a README naming this run): the process's one
	// fetcher keeps what other tests fetched, by digest.
	pkgs := map[string][]byte{}
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0"} {
		pkgs[v] = helmtest.Package("demo", helmtest.Chart("demo", v, map[string]string{"README.md": fmt.Sprintf("%s %d\n", t.Name(), time.Now().UnixNano())}))
		repo.Add("demo", v, pkgs[v])
	}
	repo.RequireAuth("robot", "chart-pw-1234")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	sync := filepath.Join(dir, "sync.yaml")
	writeFiles(t, dir, map[string]string{
		"sync.yaml": `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: chart
    helm: {chart: demo, version: "^1", repository: "` + repo.URL + `", insecure: true, secretRef: {name: charts}}
  targets:
  - name: dev
    namespace: dev
`,
		"charts.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: charts}\nstringData: {username: robot, password: chart-pw-1234}\n",
	})
	eval := func(args ...string) (int, string, string) { return evalJSON(sync, args...) }
	revision := func(out string) string { t.Helper(); return inputRevision(t, out, "chart") }
	want := "demo@1.1.0@" + helmtest.Digest(pkgs["1.1.0"])
	for range 2 {
		code, out, errOut := eval()
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := revision(out); got != want {
			t.Errorf("revision %q, want %s", got, want)
		}
		if !strings.Contains(out, `"name": "web-demo"`) || !strings.Contains(out, `"version": "1.1.0"`) {
			t.Errorf("output lacks the chart's object:\n%s", out)
		}
		if strings.Contains(out+errOut, "chart-pw-1234") {
			t.Errorf("the password shows:\n%s\n%s", out, errOut)
		}
	}
	if b, nm, c := repo.IndexBodies.Load(), repo.NotModified.Load(), repo.Charts.Load(); b != 1 || nm != 1 || c != 1 {
		t.Errorf("two runs: %d index bodies, %d answers 304, %d charts; want 1, 1, 1", b, nm, c)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"vet", sync}, &stdout, &stderr); code != 0 {
		t.Errorf("vet: exit %d: %s%s", code, stdout.String(), stderr.String())
	}

	// A wrong password: unauthorized, naming the repository, not the
	// password.
	writeFiles(t, dir, map[string]string{"charts.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: charts}\nstringData: {username: robot, password: wrong-pw-5678}\n"})
	code, _, errOut := eval()
	if code == 0 || !strings.Contains(errOut, "unauthorized") || !strings.Contains(errOut, repo.URL) || strings.Contains(errOut, "pw-") {
		t.Errorf("wrong password: exit %d: %s", code, errOut)
	}

	// A local copy beside the sync file replaces the fetch, and says so.
	writeFiles(t, dir, map[string]string{
		"chart/Chart.yaml":               "apiVersion: v2\nname: demo\nversion: 9.9.9\n",
		"chart/templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local-demo}\n",
	})
	code, out, errOut := eval()
	if code != 0 || !strings.HasPrefix(revision(out), "demo@9.9.9@local:chart@sha256:") || !strings.Contains(out, `"name": "local-demo"`) {
		t.Fatalf("local copy: exit %d, revision %q: %s", code, revision(out), errOut)
	}
	if !strings.Contains(errOut, `source "chart": read from the local copy `+filepath.Join(dir, "chart")+", not fetched from "+repo.URL) {
		t.Errorf("local copy: no note: %s", errOut)
	}
	other := t.TempDir()
	writeFiles(t, other, map[string]string{
		"Chart.yaml":               "apiVersion: v2\nname: demo\nversion: 8.0.0\n",
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: given-demo}\n",
	})
	code, out, errOut = eval("--source", "chart="+other)
	if code != 0 || !strings.HasPrefix(revision(out), "demo@8.0.0@local:"+filepath.ToSlash(other)+"@sha256:") || !strings.Contains(out, `"name": "given-demo"`) {
		t.Fatalf("--source: exit %d, revision %q: %s", code, revision(out), errOut)
	}
}

// evalJSON runs engine eval -f sync -o json with args: the exit code,
// stdout and stderr.
func evalJSON(sync string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"eval", "-f", sync, "-o", "json"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// inputRevision is the revision of source name in eval's JSON output.
func inputRevision(t *testing.T, out, name string) string {
	t.Helper()
	var res struct {
		Inputs struct{ Sources map[string]string } `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return res.Inputs.Sources[name]
}
