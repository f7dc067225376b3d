package w9

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

// replicaProc is one replica: the image's (lean) engine operator --shards auto as a
// process of its own (in a process group of its own, with its evaluation
// workers), as its own user of the API server.
type replicaProc struct {
	id, user, log string
	cmd           *exec.Cmd
	exited        chan struct{}
	exitErr       error
	mem           *memSampler
}

// startReplica starts replica id of the image's engine with kubeconfig, its Lease
// and the sharder's election in leaseNS, its log in logFile, its
// evaluation workers processes of worker (engine-worker), as in the
// image.
func startReplica(engine, worker, kubeconfig, id, user, leaseNS, logFile string) (*replicaProc, error) {
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(engine, "operator", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", harness.TrustAll,
		"--shards", "auto", "--shard-id", id, "--leader-election-namespace", leaseNS)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), enginebuild.WorkerEnv+"="+worker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Started as a pod starts it: its binary read in from the disk (pages
	// the running replicas map stay).
	if err := harness.Evict(engine); err != nil {
		log.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting replica %s: %w", id, err)
	}
	r := &replicaProc{id: id, user: user, log: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.exitErr = cmd.Wait()
		log.Close()
		close(r.exited)
	}()
	r.mem = sampleMemory(cmd.Process.Pid, 50*time.Millisecond)
	return r, nil
}

// running says whether the replica has not exited.
func (r *replicaProc) running() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// stop ends the replica as Kubernetes stops a pod: SIGTERM (it finishes
// its syncs in flight and deletes its Lease), SIGKILL after grace; and
// then its evaluation workers, if any are left.
func (r *replicaProc) stop(grace time.Duration) {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	r.mem.finish()
}

// kill ends the replica and its workers with SIGKILL, as a node's loss or
// the OOM killer would: its Lease stays until it expires.
func (r *replicaProc) kill() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.exited
	r.mem.finish()
}

// tail is the end of the replica's log, for an error.
func (r *replicaProc) tail() string {
	raw, _ := os.ReadFile(r.log)
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return fmt.Sprintf("replica %s (log %s): %s", r.id, r.log, raw)
}

// memSampler follows the memory of a process and its descendants (the
// operator's evaluation workers), as W6 does: the peak of the sum of
// their resident sets, and of the sum of their anonymous parts (RssAnon:
// what the programs allocate, without the pages of the executable, which
// are about the same in every process of one binary).
type memSampler struct {
	pid  int
	stop chan struct{}
	wg   sync.WaitGroup

	mu         sync.Mutex
	rss, anon  int64
	hwm        int64 // the process's own high-water mark
	file       int64 // the process's own file-backed pages (RssFile)
	workers    int   // the most evaluation workers (descendants) seen at once
	finishOnce sync.Once
}

func sampleMemory(pid int, interval time.Duration) *memSampler {
	s := &memSampler{pid: pid, stop: make(chan struct{})}
	s.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *memSampler) sample() {
	rss, err := harness.ProcStatus(s.pid, "VmRSS")
	if err != nil {
		return
	}
	anon, _ := harness.ProcStatus(s.pid, "RssAnon")
	hwm, _ := harness.ProcStatus(s.pid, "VmHWM")
	file, _ := harness.ProcStatus(s.pid, "RssFile")
	kids := harness.Descendants(s.pid)
	for _, k := range kids {
		if n, err := harness.ProcStatus(k, "VmRSS"); err == nil {
			rss += n
		}
		if n, err := harness.ProcStatus(k, "RssAnon"); err == nil {
			anon += n
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rss, s.anon, s.hwm, s.file = max(s.rss, rss), max(s.anon, anon), max(s.hwm, hwm), max(s.file, file)
	s.workers = max(s.workers, len(kids))
}

// peaks returns the peaks so far, in bytes: of the resident set (the
// larger of the sampled sum and the process's own high-water mark), of
// the anonymous memory, of the process's file-backed pages and of the
// process alone (its high-water mark), and the most evaluation workers it
// ran at once. It samples once more while the process runs.
func (s *memSampler) peaks() (rss, anon, file, own int64, workers int) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.rss, s.hwm), s.anon, s.file, s.hwm, s.workers
}

// finish stops sampling.
func (s *memSampler) finish() {
	s.finishOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
	})
}
