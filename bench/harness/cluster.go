package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// Cluster is a local control plane for a workload: etcd and kube-apiserver
// from the envtest assets `make envtest` builds, with the ManifestSync CRD.
type Cluster struct {
	// Config connects as an administrator, without client-side rate
	// limits (workloads set their own).
	Config *rest.Config
	// Kubeconfig is a file for tools such as kubectl and engine operator.
	Kubeconfig string
	// Root is the repository's root.
	Root string

	env       *envtest.Environment
	dir       string
	workloads *testenv.Workloads
}

// StartCluster starts a control plane; dir holds its kubeconfig.
func StartCluster(dir string) (*Cluster, error) {
	// envtest logs through controller-runtime; the report is the output.
	ctrllog.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "envtest")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
	}
	testenv.ConfigureAPIServer(env)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting a control plane with the assets in %s (make envtest): %w", assets, err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	user, err := env.AddUser(envtest.User{Name: "bench-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Config: cfg, Kubeconfig: kubeconfig, Root: root, env: env, dir: dir}, nil
}

// StartWorkloads also runs the workload test bed (testenv.StartWorkloads:
// kube-scheduler, kube-controller-manager and kwok with two fake Nodes), so
// that Deployments and the like roll out; it returns the fake Nodes' names.
// Its logs go to <dir>/workloads; Stop stops it.
func (c *Cluster) StartWorkloads() ([]string, error) {
	kc, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	w, err := testenv.StartWorkloads(kc, cl, filepath.Join(c.dir, "workloads"))
	if err != nil {
		return nil, err
	}
	c.workloads = w
	return w.Nodes, nil
}

// Stop stops the control plane (and the workload test bed).
func (c *Cluster) Stop() error {
	if c.workloads != nil {
		c.workloads.Stop()
	}
	return c.env.Stop()
}
