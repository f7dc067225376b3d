package applier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// env is the API server every test of the package shares (none under
// -short).
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env))
}

// namespace makes a namespace of the test's own.
func namespace(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "applier-" + hex.EncodeToString(b)}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
