package inspect

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// env is the API server every test of the package shares, started once;
// no operator runs against it: the tests write the status they read.
// remoteEnv is another API server: the remote cluster of the diff's
// remote targets.
var env, remoteEnv *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env, testenv.Second(&remoteEnv)))
}

// userClient is a client of the API server as user, by impersonation
// (as the UI in the cluster reads): the API server's RBAC decides what
// it may read.
func userClient(t *testing.T, user string) client.Client {
	t.Helper()
	return env.ClientAs(t, user)
}

// create creates every object, failing t on the first error.
func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}
