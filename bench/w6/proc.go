package w6

import (
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

// rssSampler follows the resident set of a process and its descendants
// (the operator's evaluation workers): the peak of their sum, sampled
// every interval, and the process's own peak as the kernel counts it. It
// splits the resident set too: the anonymous part (RssAnon: heap, stacks,
// what the programs allocate) and, of the process itself, the file-backed
// part (RssFile: mostly its executable's pages).
type rssSampler struct {
	pid  int
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	peakTree int64
	peakKids int64 // of the descendants' sum
	peakAnon int64 // of the sum of the tree's RssAnon
	peakFile int64 // of the process's own RssFile
	peakPss  int64 // of the sum of the tree's Pss
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
	sum, err := harness.ProcStatus(s.pid, "VmRSS")
	if err != nil {
		return
	}
	anon, _ := harness.ProcStatus(s.pid, "RssAnon")
	file, _ := harness.ProcStatus(s.pid, "RssFile")
	pss, _ := harness.ProcPss(s.pid)
	kids := harness.Descendants(s.pid)
	var kidsSum int64
	for _, k := range kids {
		if n, err := harness.ProcPss(k); err == nil {
			pss += n
		}
		if n, err := harness.ProcStatus(k, "VmRSS"); err == nil {
			kidsSum += n
		}
		if n, err := harness.ProcStatus(k, "RssAnon"); err == nil {
			anon += n
		}
	}
	s.mu.Lock()
	s.peakTree = max(s.peakTree, sum+kidsSum)
	s.peakKids = max(s.peakKids, kidsSum)
	s.peakAnon = max(s.peakAnon, anon)
	s.peakFile = max(s.peakFile, file)
	s.peakPss = max(s.peakPss, pss)
	s.children = s.children || len(kids) > 0
	s.mu.Unlock()
}

// peaks is what an rssSampler found, in bytes.
type peaks struct {
	total, own, children int64
	anon                 int64 // the tree's anonymous memory
	file                 int64 // the process's own file-backed pages
	pss                  int64 // the tree's proportional set size
}

// finish stops sampling and returns the peaks: in total the larger of the
// sampled sum and the process's own high-water mark. It must be called
// while the process still runs.
func (s *rssSampler) finish() (peaks, error) {
	s.sample()
	close(s.stop)
	s.wg.Wait()
	hwm, err := harness.ProcStatus(s.pid, "VmHWM")
	s.mu.Lock()
	defer s.mu.Unlock()
	return peaks{total: max(s.peakTree, hwm), own: hwm, children: s.peakKids, anon: s.peakAnon, file: s.peakFile, pss: s.peakPss}, err
}
