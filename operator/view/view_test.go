package view

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// ansi matches a colour code.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func sample() *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: "home", Name: "web", Generation: 2},
		Status: v1alpha1.ManifestSyncStatus{
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: 2,
				Reason: v1alpha1.ReasonConflict, Message: "target \"b\": ConfigMap b/x exists and is not managed by this ManifestSync"}},
			Targets: []v1alpha1.TargetStatus{
				{Name: "a", Cluster: "in-cluster", Namespace: "team-1", State: v1alpha1.TargetSynced},
				{Name: "a", Cluster: "in-cluster", Namespace: "team-2", State: v1alpha1.TargetSynced},
				{Name: "b", Cluster: "eu", Namespace: "b", State: v1alpha1.TargetConflict, Message: "ConfigMap b/x exists"},
			},
			Inventory: []v1alpha1.InventoryEntry{
				{ID: "team-1_cfg__ConfigMap", Version: "v1", Target: "a/team-1"},
				{ID: "team-2_cfg__ConfigMap", Version: "v1", Target: "a/team-2", Drifted: true},
				{ID: "b_web_apps_Deployment", Version: "v1", Target: "b", Missing: true},
				{ID: "_view-all_rbac.authorization.k8s.io_ClusterRole", Version: "v1", Target: "b"},
				{ID: "gone_x__Secret", Version: "v1", Target: "old"},
			},
			History: []v1alpha1.HistoryEntry{{Revision: "sha256:1"}, {Revision: "sha256:2"}, {Revision: "sha256:3"}},
		},
	}
}

// Objects go to their target's row (a namespaceSelector target's by
// "name/namespace"), named "Kind namespace/name", with their state; those
// of a target without a row are shown too.
func TestDescribe(t *testing.T) {
	d := describe(t, sample(), 2)
	var got []string
	for _, tg := range d.Targets {
		for _, o := range tg.Objects {
			got = append(got, tg.Name+"/"+tg.Namespace+": "+o.Object+" "+o.State)
		}
	}
	want := []string{
		"a/team-1: ConfigMap team-1/cfg Synced",
		"a/team-2: ConfigMap team-2/cfg Drifted",
		"b/b: Deployment b/web Missing",
		"b/b: ClusterRole view-all Synced",
		"old/: Secret gone/x Synced",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(d.History) != 2 || d.History[0].Revision != "sha256:1" {
		t.Errorf("history %+v, want the 2 newest", d.History)
	}
	if d.Ready != "False" || d.Reason != v1alpha1.ReasonConflict || d.TargetsSynced != 2 || d.TargetsTotal != 3 {
		t.Errorf("summary %+v", d.Summary)
	}
}

// A Ready condition of an older generation is not the current state.
func TestSummarizeStaleCondition(t *testing.T) {
	ms := sample()
	ms.Generation = 3
	if s := Summarize(ms); s.Ready != "Unknown" {
		t.Errorf("ready %q, want Unknown", s.Ready)
	}
}

// Colours only when asked, and columns line up either way.
func TestColour(t *testing.T) {
	d := describe(t, sample(), 0)
	var plain, colour strings.Builder
	if err := WriteDetail(&plain, d, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteDetail(&colour, d, Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b[") {
		t.Errorf("plain output has colour codes:\n%s", plain.String())
	}
	for _, want := range []string{"\x1b[33mDrifted\x1b[0m", "\x1b[31mMissing\x1b[0m", "\x1b[31mConflict\x1b[0m", "\x1b[31mFalse\x1b[0m"} {
		if !strings.Contains(colour.String(), want) {
			t.Errorf("coloured output lacks %q:\n%s", want, colour.String())
		}
	}
	if stripped := ansi.ReplaceAllString(colour.String(), ""); stripped != plain.String() {
		t.Errorf("colour changes the text:\n%s\nwant:\n%s", stripped, plain.String())
	}
	for _, want := range []string{
		"│   └── ConfigMap team-1/cfg  Synced\n",
		"│   ├── Deployment b/web      Missing\n",
		"│   └── ClusterRole view-all  Synced\n",
	} {
		if !strings.Contains(plain.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, plain.String())
		}
	}

	var table, colourTable strings.Builder
	items := []Summary{Summarize(sample()), {Namespace: "n", Name: "other-sync", Ready: "True", Reason: "Synced", TargetsSynced: 1, TargetsTotal: 1}}
	if err := WriteTable(&table, items, Options{MessageWidth: 20}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&colourTable, items, Options{MessageWidth: 20, Color: true}); err != nil {
		t.Fatal(err)
	}
	want := "NAMESPACE  NAME        READY  REASON    TARGETS  REVISION  LAST SYNC  MESSAGE\n" +
		"home       web         False  Conflict  2/3      -         -          target \"b\": Confi...\n" +
		"n          other-sync  True   Synced    1/1      -         -          -\n"
	if table.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), want)
	}
	if stripped := ansi.ReplaceAllString(colourTable.String(), ""); stripped != want || !strings.Contains(colourTable.String(), "\x1b[32mTrue\x1b[0m ") {
		t.Errorf("coloured table:\n%q", colourTable.String())
	}
}

// The detail shows the Healthy condition, each target's health and each
// object's as Judge set it, with the message of those not Current.
func TestDetailShowsHealth(t *testing.T) {
	ms := sample()
	ms.Status.Conditions = append(ms.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionHealthy, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonHealthCheckFailed, Message: "not Current: Deployment b/web: not found"})
	ms.Status.Targets[0].Health = v1alpha1.HealthHealthy
	ms.Status.Targets[2].Health = v1alpha1.HealthDegraded
	d := describe(t, ms, 0)
	d.Judge(func(tg Target, o Object) (string, string, bool) {
		switch {
		case tg.Cluster == "eu" && o.Kind == "Deployment":
			return "NotFound", "not found", true
		case tg.Cluster == "eu":
			return "", "", false
		}
		return "Current", "fine", true
	})
	var b strings.Builder
	if err := WriteDetail(&b, d, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Healthy:    False (HealthCheckFailed): not Current: Deployment b/web: not found\n",
		"a (in-cluster/team-1)  Synced  Healthy  1 object\n",
		"ConfigMap team-1/cfg  Synced  Current\n",
		"b (eu/b)  Conflict  Degraded  2 objects",
		"Deployment b/web      Missing  NotFound  not found\n",
		"ClusterRole view-all  Synced\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("detail lacks %q:\n%s", want, b.String())
		}
	}
}

// describe is Describe, failing t on an error.
func describe(t *testing.T, ms *v1alpha1.ManifestSync, history int) Detail {
	t.Helper()
	d, err := Describe(ms, history)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The objects of a gzipped inventory are listed as those of a plain one.
func TestDescribeGzippedInventory(t *testing.T) {
	plain := sample()
	gz := sample()
	if err := gz.Status.SetInventory(gz.Status.Inventory, 10); err != nil {
		t.Fatal(err)
	}
	if gz.Status.Inventory != nil || len(gz.Status.InventoryGzip) == 0 {
		t.Fatalf("not gzipped: %+v", gz.Status)
	}
	got, want := describe(t, gz, 0), describe(t, plain, 0)
	if len(want.Targets) == 0 || len(want.Targets[0].Objects) == 0 {
		t.Fatalf("the sample lists no objects: %+v", want.Targets)
	}
	if !reflect.DeepEqual(got.Targets, want.Targets) {
		t.Errorf("targets from the gzipped inventory:\n%+v\nwant\n%+v", got.Targets, want.Targets)
	}
	gz.Status.InventoryGzip = []byte("junk")
	if _, err := Describe(gz, 0); err == nil || !strings.Contains(err.Error(), "status.inventoryGzip") {
		t.Errorf("a corrupt inventory: %v", err)
	}
}
