package shard

import (
	"os"
	"testing"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// env is the API server every test of the package shares.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &env)) }
