package engine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	want := []string{"early", "widgets.example.com,ns,w,zero", "late"}
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
