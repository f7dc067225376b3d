package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Two targets writing one object are refused by the evaluation: the
// ManifestSync is not Ready, says which targets and object collide, and
// the object is never written, so the two never rewrite each other's copy.
func TestCollidingTargetsWriteNothing(t *testing.T) {
	env.Need(t)
	home, web := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "collide", v1alpha1.ManifestSyncSpec{
		Transform: inline("def main(ctx):\n    return [{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"settings\"}, \"data\": {\"t\": ctx.target.name}}]\n"),
		Targets:   []v1alpha1.Target{{Name: "first", Namespace: web}, {Name: "second", Namespace: web}},
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonEvalFailed)
	msg := condition(got, v1alpha1.ConditionReady).Message
	for _, want := range []string{
		fmt.Sprintf(`target "first": ConfigMap %s/settings is also written by target "second"`, web),
		fmt.Sprintf(`target "second": ConfigMap %s/settings is also written by target "first"`, web),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	waitEvent(t, ms, EventSyncFailed, "is also written by target")
	// Give a wrongly applied object the time to show.
	time.Sleep(500 * time.Millisecond)
	if _, err := getConfigMap(web, "settings"); !apierrors.IsNotFound(err) {
		t.Errorf("%s/settings: %v, want it never written", web, err)
	}
}
