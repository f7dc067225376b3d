package w6

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// statusBytes reads a field such as VmRSS or VmHWM of /proc/PID/status, in
// bytes.
func statusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// descendants are the processes below pid.
func descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := map[int]int{}
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		parent[self] = ppid
	}
	var out []int
	for child := range parent {
		for p := parent[child]; p > 1; p = parent[p] {
			if p == pid {
				out = append(out, child)
				break
			}
		}
	}
	return out
}

// rssSampler follows the resident set of a process and its descendants
// (the operator's evaluation workers): the peak of their sum, sampled
// every interval, and the process's own peak as the kernel counts it.
type rssSampler struct {
	pid  int
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	peakTree int64
	peakKids int64 // of the descendants' sum
	children bool
}

func sampleRSS(pid int, interval time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{})}
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

func (s *rssSampler) sample() {
	sum, err := statusBytes(s.pid, "VmRSS")
	if err != nil {
		return
	}
	kids := descendants(s.pid)
	var kidsSum int64
	for _, k := range kids {
		if n, err := statusBytes(k, "VmRSS"); err == nil {
			kidsSum += n
		}
	}
	s.mu.Lock()
	s.peakTree = max(s.peakTree, sum+kidsSum)
	s.peakKids = max(s.peakKids, kidsSum)
	s.children = s.children || len(kids) > 0
	s.mu.Unlock()
}

// peaks is what an rssSampler found.
type peaks struct {
	total, own, children int64 // bytes
}

// finish stops sampling and returns the peaks: in total the larger of the
// sampled sum and the process's own high-water mark. It must be called
// while the process still runs.
func (s *rssSampler) finish() (peaks, error) {
	s.sample()
	close(s.stop)
	s.wg.Wait()
	hwm, err := statusBytes(s.pid, "VmHWM")
	s.mu.Lock()
	defer s.mu.Unlock()
	return peaks{total: max(s.peakTree, hwm), own: hwm, children: s.peakKids}, err
}
