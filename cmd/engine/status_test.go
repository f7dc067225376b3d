package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/view"
)

// statusSyncYAML adds to syncYAML a second target, prod, and reports
// drift instead of correcting it, so that a hand edit stays.
const statusSyncYAML = syncYAML + `  - name: prod
    namespace: %[2]s
  policy: {drift: Report}
`

// engine status against a ManifestSync of two targets, one of them
// drifted: the table, the tree (golden files, testdata/status/*.golden,
// rewritten with -update) and the JSON document.
func TestStatusGolden(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	home, prod := env.Namespace(t, nil), env.Namespace(t, nil)
	dev := home // syncYAML's target dev is the ManifestSync's namespace
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"sync.yaml": fmt.Sprintf(statusSyncYAML, home, prod)})
	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{
		"web.yaml":    webConfigMap,
		"secret.yaml": secretYAML("admin", "s3cret-Pa55"),
	})
	syncDir(t, env, dir)

	// A hand edit of prod's ConfigMap: reported, and left.
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: prod, Name: "web"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "red"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: home, Name: "web"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, key, ms); err != nil {
			t.Fatal(err)
		}
		if drifted(ms) == prod+"_web__ConfigMap" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drift was not recorded: inventory %+v", ms.Status.Inventory)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Namespaces, times and digests differ from run to run: they are
	// replaced by text of the same length, so that columns stay aligned.
	normal := strings.NewReplacer(home, "t-home0000", prod, "t-prod0000")
	normalize := func(s string) string {
		s = normal.Replace(s)
		s = timePattern.ReplaceAllString(s, "YYYY-MM-DDTHH:MM:SSZ")
		return digestPattern.ReplaceAllStringFunc(s, func(d string) string {
			algo, hex, _ := strings.Cut(d, ":")
			return algo + ":" + strings.Repeat("x", len(hex))
		})
	}
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"web.golden", []string{"status", "web", "-n", home}},
		{"list.golden", []string{"status", "-n", home}},
	} {
		code, stdout, stderr := engineCluster(t, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("engine %v: exit %d, stderr %q", tc.args, code, stderr)
		}
		compareGolden(t, filepath.Join("testdata", "status", tc.golden), normalize(stdout))
	}

	code, stdout, _ := engineCluster(t, "status", "web", "-n", home, "-o", "json")
	var d view.Detail
	if err := json.Unmarshal([]byte(stdout), &d); code != 0 || err != nil {
		t.Fatalf("-o json: exit %d, %v", code, err)
	}
	states := map[string]string{}
	for _, tg := range d.Targets {
		if tg.Health != string(v1alpha1.HealthHealthy) {
			t.Errorf("-o json: target %s has health %q, want Healthy", tg.Name, tg.Health)
		}
		for _, o := range tg.Objects {
			states[tg.Name+" "+o.Object] = o.State
			if o.Health != "Current" {
				t.Errorf("-o json: %s of target %s has health %q, want Current", o.Object, tg.Name, o.Health)
			}
		}
	}
	if d.Healthy != "True" {
		t.Errorf("-o json: Healthy is %q, want True", d.Healthy)
	}
	want := map[string]string{
		"dev ConfigMap " + dev + "/web":   view.StateSynced,
		"dev Secret " + dev + "/creds":    view.StateSynced,
		"prod ConfigMap " + prod + "/web": view.StateDrifted,
		"prod Secret " + prod + "/creds":  view.StateSynced,
	}
	if fmt.Sprint(states) != fmt.Sprint(want) || d.Ready != "True" || d.TargetsSynced != 2 || len(d.History) == 0 {
		t.Errorf("-o json: objects %v, ready %s, %d/%d targets synced, %d history entries; want objects %v, ready, 2/2, some history",
			states, d.Ready, d.TargetsSynced, d.TargetsTotal, len(d.History), want)
	}
	if strings.Contains(stdout, "s3cret-Pa55") {
		t.Error("-o json shows the Secret's value")
	}

	// kubectl get -o wide shows the columns of priority 1 of the table
	// the API server makes.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/manifestsync.dev/v1alpha1/namespaces", home, "manifestsyncs", "web").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table: %v, %s", err, raw)
	}
	wide := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if c.Priority == 1 {
			wide[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	if wide["Suspended"] != "false" || wide["Last sync"] == "<nil>" || wide["Last sync"] == "" ||
		!strings.HasPrefix(wide["Message"], "Applied revision sha256:") {
		t.Errorf("wide columns %q, want Suspended false, a Last sync and the Ready message", wide)
	}
}

// The errors of engine status: exit 2, saying what is wrong.
func TestStatusErrors(t *testing.T) {
	env := needCluster(t)
	ns := env.Namespace(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "nope", "-n", ns}, "ManifestSync " + ns + "/nope not found"},
		{[]string{"status", "-n", ns, "-o", "yaml"}, `-o "yaml": want text or json`},
		{[]string{"status", "a", "b"}, "accepts at most 1 arg"},
	} {
		if code, _, stderr := engineCluster(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("engine %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	// No ManifestSync in the namespace: the table's header alone.
	if code, stdout, _ := engineCluster(t, "status", "-n", ns); code != 0 || !strings.HasPrefix(stdout, "NAMESPACE  NAME  READY") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("empty namespace: exit %d, %q", code, stdout)
	}
}

var (
	timePattern   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	digestPattern = regexp.MustCompile(`sha(?:256|1):[0-9a-f]+`)
)

// drifted is the id of the one drifted inventory entry, or "".
func drifted(ms *v1alpha1.ManifestSync) string {
	var ids []string
	for _, e := range ms.Status.Inventory {
		if e.Drifted {
			ids = append(ids, e.ID)
		}
	}
	return strings.Join(ids, ",")
}

// compareGolden compares got with the file, or rewrites it under -update.
func compareGolden(t *testing.T, file, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to rewrite it):\n--- got\n%s\n--- want\n%s", file, got, want)
	}
}
