package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeLabel labels the fake Nodes of WithWorkloads; kwok manages the Nodes
// that have it (and only those).
const NodeLabel = "testenv.manifestsync.dev/kwok"

// workloadNodes is how many fake Nodes WithWorkloads registers.
const workloadNodes = 2

// workloadControllers are the controllers kube-controller-manager runs for
// WithWorkloads: those that roll workloads out and clean up after them. No
// node lifecycle (kwok keeps the Nodes Ready), no cloud, no service
// accounts (envtest disables their admission), no endpoints.
var workloadControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"daemonset-controller",
	"job-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
	"garbage-collector-controller",
	"pod-garbage-collector-controller",
	"namespace-controller",
}

// Workloads is a running workload test bed: the programs StartWorkloads
// started and the fake Nodes it registered.
type Workloads struct {
	// Nodes are the names of the fake Nodes, sorted.
	Nodes []string
	// Dir holds the programs' kubeconfig and logs (NAME.log).
	Dir string

	procs []*process
}

// process is a program of the test bed, logging into a file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it has exited; err is then set
	err  error
}

// WithWorkloads is a Setup that makes workloads roll out as in a cluster,
// with StartWorkloads; Env.Nodes are its fake Nodes. Its logs go to a
// temporary directory, whose name and the last lines of each log are
// printed when the tests fail (and which is removed when they pass).
//
// It costs CPU (the controller manager watches much of the cluster), so a
// test package opts in: Run(m, &env, WithWorkloads()).
func WithWorkloads() Setup {
	return func(e *Env) (func(), error) {
		dir, err := os.MkdirTemp("", "testenv-workloads-")
		if err != nil {
			return nil, err
		}
		kubeconfig, err := e.Kubeconfig("testenv-workloads")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("making the kubeconfig of the workload test bed: %w", err)
		}
		w, err := StartWorkloads(kubeconfig, e.Client, dir)
		if err != nil {
			return nil, err
		}
		e.workloads, e.Nodes = w, w.Nodes
		return func() {
			w.Stop()
			if e.failed {
				fmt.Fprintf(os.Stderr, "testenv: the workload test bed's logs are in %s\n", dir)
				return
			}
			_ = os.RemoveAll(dir)
		}, nil
	}
}

// StartWorkloads starts, against the API server that kubeconfig (an
// administrator's) reaches and c is a client of, what makes workloads roll
// out as in a cluster: kube-scheduler, kube-controller-manager (the
// controllers of Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs
// and CronJobs, the garbage collectors and the namespace controller; a few
// workers each) and kwok, from the assets directory (bin/envtest). It
// registers two fake Nodes (labelled NodeLabel=true) that kwok keeps Ready;
// kwok runs the pods scheduled on them with its default stages: a pod
// becomes Running and Ready at once, a Job's pod completes, a deleted pod
// goes. The programs serve nothing; their kubeconfig and logs go to dir.
// When it fails, it prints the last lines of each log to stderr and stops
// what it started; otherwise Stop stops it.
func StartWorkloads(kubeconfig []byte, c client.Client, dir string) (*Workloads, error) {
	w := &Workloads{Dir: dir}
	if err := w.start(kubeconfig, c); err != nil {
		w.PrintLogs(os.Stderr)
		w.Stop()
		return nil, err
	}
	return w, nil
}

func (w *Workloads) start(raw []byte, c client.Client) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	assets, err := assetsDir(root, "kube-controller-manager", "kube-scheduler", "kwok", "kwok.yaml")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		return err
	}
	kubeconfig := filepath.Join(w.Dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
		return err
	}
	// --secure-port=0: none of them serves anything.
	bin := func(name string) string { return filepath.Join(assets, name) }
	starts := []struct {
		name string
		args []string
	}{
		{"kube-scheduler", []string{
			"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1",
		}},
		{"kube-controller-manager", []string{
			"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1",
			"--controllers=" + strings.Join(workloadControllers, ","),
			"--kube-api-qps=200", "--kube-api-burst=400",
			"--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2",
			"--concurrent-statefulset-syncs=2", "--concurrent-daemonset-syncs=2",
			"--concurrent-job-syncs=2", "--concurrent-cron-job-syncs=1",
			"--concurrent-ttl-after-finished-syncs=1", "--concurrent-gc-syncs=2",
			"--concurrent-namespace-syncs=2",
		}},
		{"kwok", []string{
			"--kubeconfig=" + kubeconfig, "--config=" + bin("kwok.yaml"),
			"--manage-all-nodes=false", "--manage-nodes-with-label-selector=" + NodeLabel + "=true",
			"--cidr=10.0.0.0/16", "--node-ip=10.255.0.1", "--node-lease-duration-seconds=0",
		}},
	}
	for _, s := range starts {
		p, err := w.run(s.name, bin(s.name), s.args)
		if err != nil {
			return err
		}
		w.procs = append(w.procs, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w.Nodes, err = w.registerNodes(ctx, c)
	return err
}

// run starts a program with its output into <dir>/<name>.log.
func (w *Workloads) run(name, path string, args []string) (*process, error) {
	p := &process{name: name, log: filepath.Join(w.Dir, name+".log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Should the test binary die without its teardown (a panic, a
	// timeout), the programs die with it rather than linger.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// registerNodes creates the fake Nodes and waits until kwok has made them
// Ready (or a program has exited, or ctx ends). The API server's admission
// taints a new Node not-ready; once it is Ready, registerNodes removes the
// taint, as the node lifecycle controller (which the test bed does not run:
// kwok keeps no heartbeats) would.
func (w *Workloads) registerNodes(ctx context.Context, c client.Client) ([]string, error) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	var names []string
	for i := range workloadNodes {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				Labels: map[string]string{
					NodeLabel:                "true",
					"kubernetes.io/hostname": name,
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
					"type":                   "kwok",
				},
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if err := c.Create(ctx, node); err != nil {
			return nil, fmt.Errorf("creating Node %s: %w", name, err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		for {
			node := &corev1.Node{}
			err := c.Get(ctx, client.ObjectKey{Name: name}, node)
			if err == nil && nodeReady(node) {
				break
			}
			if exited := w.exited(); exited != nil {
				return nil, fmt.Errorf("waiting for Node %s to become Ready: %w", name, exited)
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for Node %s to become Ready (is kwok running?): %w", name, errors.Join(ctx.Err(), err))
			case <-time.After(100 * time.Millisecond):
			}
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		untaint := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"taints":null}}`))
		if err := c.Patch(ctx, node, untaint); err != nil {
			return nil, fmt.Errorf("removing the not-ready taint of Node %s: %w", name, err)
		}
	}
	return names, nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// exited says which program has exited, if one has.
func (w *Workloads) exited() error {
	for _, p := range w.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v (log: %s)", p.name, p.err, p.log)
		default:
		}
	}
	return nil
}

// Stop stops each program by its pid: SIGTERM, then SIGKILL after 10s.
func (w *Workloads) Stop() {
	for _, p := range w.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range w.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// logTail is how many lines of each log printLogs prints.
const logTail = 60

// PrintLogs prints the last lines of each program's log.
func (w *Workloads) PrintLogs(out io.Writer) {
	for _, p := range w.procs {
		raw, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		lines := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
		if len(lines) > logTail {
			lines = lines[len(lines)-logTail:]
		}
		state := "running"
		select {
		case <-p.done:
			state = fmt.Sprintf("exited: %v", p.err)
		default:
		}
		fmt.Fprintf(out, "testenv: --- the last %d lines of %s (%s; %s)\n%s\n", len(lines), p.name, state, p.log, bytes.Join(lines, []byte("\n")))
	}
}
