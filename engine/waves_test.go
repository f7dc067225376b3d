package engine

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

func waveObj(apiVersion, kind, name, wave string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetName(name)
	if wave != "" {
		o.SetAnnotations(map[string]string{WaveAnnotation: wave})
	}
	return o
}

func TestWaves(t *testing.T) {
	objs := []*unstructured.Unstructured{
		waveObj("v1", "ConfigMap", "late", "2"),
		waveObj("example.com/v1", "Widget", "w", ""),
		waveObj("v1", "Namespace", "ns", ""),
		waveObj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com", ""),
		waveObj("v1", "ConfigMap", "early", "-1"),
		waveObj("v1", "ConfigMap", "zero", "0"),
	}
	waves, err := Waves(objs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range waves {
		var names []string
		for _, o := range w.Objects {
			names = append(names, o.GetName())
		}
		got = append(got, strings.Join(names, ","))
	}
	// Argo CD's kind order: Namespace, ConfigMap, CRD, then custom
	// resources.
	want := []string{"early", "ns,zero,widgets.example.com,w", "late"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("waves = %q, want %q", got, want)
	}
	if waves[0].N != -1 || waves[1].N != 0 || waves[2].N != 2 {
		t.Fatalf("wave numbers = %d %d %d", waves[0].N, waves[1].N, waves[2].N)
	}
}

func TestWaveOfRejectsNonInteger(t *testing.T) {
	o := waveObj("v1", "ConfigMap", "cm", "first")
	o.SetNamespace("web")
	_, err := WaveOf(o)
	if err == nil || !strings.Contains(err.Error(), `ConfigMap web/cm: annotation manifestsync.dev/wave: "first" is not an integer`) {
		t.Fatalf("err = %v", err)
	}
}

// ids names the objects of each wave, "N: Kind ns/name, ...".
func ids(waves []Wave) []string {
	var out []string
	for _, w := range waves {
		var names []string
		for _, o := range w.Objects {
			names = append(names, v1alpha1.IDOf(o).String())
		}
		out = append(out, strconv.Itoa(w.N)+": "+strings.Join(names, ", "))
	}
	return out
}

// Inside a wave, objects go in Argo CD's kind order, then by name, then
// namespace, whatever order they are given in; a custom resource named as
// a built-in kind still follows its CRD and the Namespaces, and webhook
// configurations come last.
func TestWavesArgoOrder(t *testing.T) {
	var objs []*unstructured.Unstructured
	for _, o := range [][5]string{ // apiVersion, kind, namespace, name, wave
		{"admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "a-hook", ""},
		{"example.com/v1", "Widget", "", "b", ""},
		{"example.com/v1", "Gadget", "", "a", ""},
		{"example.com/v1", "ConfigMap", "", "custom", ""}, // a custom resource named as a built-in kind
		{"batch/v1", "CronJob", "web", "a", ""},
		{"batch/v1", "Job", "web", "z", ""},
		{"apps/v1", "Deployment", "web", "web", ""},
		{"v1", "Service", "web", "web", ""},
		{"rbac.authorization.k8s.io/v1", "Role", "web", "r", ""},
		{"apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com", ""},
		{"v1", "ConfigMap", "web", "b", ""},
		{"v1", "ConfigMap", "web", "a", ""},
		{"v1", "ConfigMap", "db", "a", ""},
		{"v1", "Secret", "web", "z", ""},
		{"v1", "ServiceAccount", "web", "z", ""},
		{"v1", "Namespace", "", "web", ""},
		{"v1", "ConfigMap", "web", "later", "1"},
		{"v1", "Secret", "web", "later", "1"},
	} {
		obj := waveObj(o[0], o[1], o[3], o[4])
		obj.SetNamespace(o[2])
		objs = append(objs, obj)
	}
	want := []string{
		"0: Namespace web, ServiceAccount web/z, Secret web/z, ConfigMap db/a, ConfigMap web/a, ConfigMap web/b, " +
			"CustomResourceDefinition widgets.example.com, Role web/r, Service web/web, Deployment web/web, Job web/z, CronJob web/a, " +
			"Gadget a, Widget b, ConfigMap custom, ValidatingWebhookConfiguration a-hook",
		"1: Secret web/later, ConfigMap web/later",
	}
	reversed := slices.Clone(objs)
	slices.Reverse(reversed)
	for _, order := range [][]*unstructured.Unstructured{objs, reversed} {
		waves, err := Waves(order)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(waves); !slices.Equal(got, want) {
			t.Fatalf("waves\n%q\nwant\n%q", got, want)
		}
	}
}

// A Namespace or a CRD of a later wave than an object that needs it is
// applied in that object's wave, as Argo CD moves it; one no earlier
// object needs keeps its wave.
func TestWavesLiftDependencies(t *testing.T) {
	crd := waveObj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com", "3")
	crd.Object["spec"] = map[string]any{"group": "example.com", "names": map[string]any{"kind": "Widget"}}
	widget := waveObj("example.com/v1", "Widget", "w", "1")
	widget.SetNamespace("web")
	cm := waveObj("v1", "ConfigMap", "cm", "-1")
	cm.SetNamespace("web")
	objs := []*unstructured.Unstructured{
		crd, widget, cm,
		waveObj("v1", "Namespace", "web", "2"),
		waveObj("v1", "Namespace", "idle", "2"),
		waveObj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "gadgets.example.com", "3"),
	}
	waves, err := Waves(objs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-1: Namespace web, ConfigMap web/cm",
		"1: CustomResourceDefinition widgets.example.com, Widget web/w",
		"2: Namespace idle",
		"3: CustomResourceDefinition gadgets.example.com",
	}
	if got := ids(waves); !slices.Equal(got, want) {
		t.Fatalf("waves\n%q\nwant\n%q", got, want)
	}
}
