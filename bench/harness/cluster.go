package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// AuditLog is the API server's audit log (WithWriteAudit), or "".
	AuditLog string

	env       *envtest.Environment
	dir       string
	workloads *testenv.Workloads
}

// ClusterOption changes the control plane StartCluster starts.
type ClusterOption func(te *envtest.Environment, c *Cluster) error

// WithWriteAudit makes the API server log every successful or failed
// write (create, update, patch, delete) of the named resources of the
// core group, with its user and time, to Cluster.AuditLog in dir, one
// JSON event a line (testenv.ReadAudit reads it): a workload tells which
// process wrote what, and when, each process its own user (UserKubeconfig).
// The log is written as requests come (blocking mode), so that none is
// dropped; only those resources are logged, to keep it small.
func WithWriteAudit(resources ...string) ClusterOption {
	return func(te *envtest.Environment, c *Cluster) error {
		f, err := os.CreateTemp(c.dir, "audit-*.log")
		if err != nil {
			return err
		}
		f.Close()
		policy := strings.TrimSuffix(f.Name(), ".log") + "-policy.yaml"
		rules := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  resources: [{group: "", resources: [%s]}]
- level: None
`, strings.Join(resources, ", "))
		if err := os.WriteFile(policy, []byte(rules), 0o600); err != nil {
			return err
		}
		args := te.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", f.Name())
		args.Set("audit-log-format", "json")
		args.Set("audit-log-mode", "blocking")
		c.AuditLog = f.Name()
		return nil
	}
}

// StartCluster starts a control plane; dir holds its kubeconfig (and its
// audit log).
func StartCluster(dir string, opts ...ClusterOption) (*Cluster, error) {
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
	c := &Cluster{dir: dir, env: env}
	for _, opt := range opts {
		if err := opt(env, c); err != nil {
			return nil, err
		}
	}
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
	c.Config, c.Kubeconfig, c.Root = cfg, kubeconfig, root
	return c, nil
}

// UserKubeconfig writes a kubeconfig of a new user of the API server in
// the group system:masters, for a process whose requests the audit log
// tells apart by its user, and returns its path.
func (c *Cluster) UserKubeconfig(name string) (string, error) {
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "kubeconfig-"+name)
	return path, os.WriteFile(path, kc, 0o600)
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
