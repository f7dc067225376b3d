package controller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

func TestInstanceIdentity(t *testing.T) {
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "web.app"}}
	none, a := Options{}, Options{InstanceID: "eu-1"}
	if none.owner(ms) != "platform.web.app" || none.fieldManager() != "manifestsync" {
		t.Errorf("without id: %q, %q", none.owner(ms), none.fieldManager())
	}
	if a.owner(ms) != "platform.web.app_eu-1" || a.fieldManager() != "manifestsync-eu-1" {
		t.Errorf("with id: %q, %q", a.owner(ms), a.fieldManager())
	}

	// Each instance maps only its own objects to their ManifestSync.
	obj := func(owner string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{OwnerLabel: owner}}}
	}
	want := types.NamespacedName{Namespace: "platform", Name: "web.app"}
	for _, tc := range []struct {
		o     Options
		owner string
		ok    bool
	}{
		{none, "platform.web.app", true},
		{none, "platform.web.app_eu-1", false},
		{a, "platform.web.app_eu-1", true},
		{a, "platform.web.app_eu-2", false},
		{a, "platform.web.app", false},
		{a, "garbage", false},
	} {
		reqs := tc.o.ownerRequests(context.Background(), obj(tc.owner))
		if got := len(reqs) == 1 && reqs[0].NamespacedName == want; got != tc.ok || (!tc.ok && len(reqs) != 0) {
			t.Errorf("instance %q, owner %q: %v", tc.o.InstanceID, tc.owner, reqs)
		}
	}

	if got := ownedBy("platform.web_eu-2"); !strings.Contains(got, "ManifestSync platform/web of operator instance eu-2") {
		t.Errorf("ownedBy: %q", got)
	}
	for id, ok := range map[string]bool{"": true, "eu-1": true, "a": true, "EU": false, "a_b": false, "-a": false, strings.Repeat("a", 21): false} {
		if err := ValidateInstanceID(id); (err == nil) != ok {
			t.Errorf("ValidateInstanceID(%q) = %v", id, err)
		}
	}
}
