package controller

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The capabilities charts see are the cluster's, as Helm asks it: its
// version, and every group version and group version with a kind, sorted;
// asked once per capabilityTTL, the last ones served while discovery
// fails.
func TestCapabilities(t *testing.T) {
	asked := 0
	fake := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}, FakedServerVersion: &version.Info{GitVersion: "v1.36.2"}}
	fake.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap"}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget"}}},
	}
	discover := func() (discovery.DiscoveryInterface, error) {
		asked++
		return fake, nil
	}
	var c capabilityCache
	e, err := c.get("", discover)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"example.com/v1", "example.com/v1/Widget", "v1", "v1/ConfigMap"}
	if e.caps.KubeVersion != "v1.36.2" || !slices.Equal(e.caps.APIVersions, want) {
		t.Errorf("capabilities %+v, want v1.36.2 and %v", e.caps, want)
	}
	if again, _ := c.get("", discover); asked != 1 || again.digest != e.digest {
		t.Errorf("asked %d times within the TTL", asked)
	}
	old := c.entries[""]
	old.at = old.at.Add(-capabilityTTL)
	c.entries[""] = old
	failing := func() (discovery.DiscoveryInterface, error) { return nil, errors.New("down") }
	if stale, err := c.get("", failing); err != nil || stale.digest != e.digest {
		t.Errorf("a failed discovery after the TTL: %v, %v", stale, err)
	}
	if _, err := c.get("other", failing); err == nil {
		t.Error("a cluster never discovered, discovery failing: no error")
	}
}
