package applier

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// failingReader fails every read with err: what getLive says about a read
// that failed is under test, not what the API server decides.
type failingReader struct {
	client.Reader
	err error
}

func (r failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return r.err
}

// TestGetLiveNamesObjectID: a failed read names the object as
// v1alpha1.ObjectID does; a cluster-scoped one read "Namespace /web".
func TestGetLiveNamesObjectID(t *testing.T) {
	r := failingReader{err: errors.New("connection refused")}
	for key, want := range map[client.ObjectKey]string{
		{Name: "web"}:                     "reading Namespace web: connection refused",
		{Namespace: "web-dev", Name: "x"}: "reading Namespace web-dev/x: connection refused",
	} {
		_, err := getLive(context.Background(), r, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, key)
		if err == nil || err.Error() != want {
			t.Errorf("%v: %v, want %q", key, err, want)
		}
	}
}
