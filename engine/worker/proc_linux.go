package worker

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// limitAddressSpace sets RLIMIT_AS to the address space the process has
// mapped now plus limit: the Go runtime reserves its address space up
// front, so a limit that ignored it would stop the worker before its first
// allocation. Threads the runtime starts later reserve a stack each (with
// cgo, RLIMIT_STACK's worth), so there is room for GOMAXPROCS more of
// them; the parent's watchdog bounds what is resident.
func limitAddressSpace(limit uint64) (uint64, error) {
	vsz, _, err := statm(os.Getpid())
	if err != nil {
		return 0, err
	}
	stack := uint64(8 << 20)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_STACK, &rl); err == nil && rl.Cur > 0 && rl.Cur < 64<<20 {
		stack = rl.Cur
	}
	as := vsz + limit + uint64(runtime.GOMAXPROCS(0)+16)*stack
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
		return 0, fmt.Errorf("setting RLIMIT_AS: %w", err)
	}
	return as, nil
}

// statm returns a process's virtual and resident size in bytes.
func statm(pid int) (vsz, rss uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("/proc/%d/statm: unexpected %q", pid, b)
	}
	pages := make([]uint64, 2)
	for i := range pages {
		if pages[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/statm: %w", pid, err)
		}
	}
	page := uint64(os.Getpagesize())
	return pages[0] * page, pages[1] * page, nil
}

// residentSize is what a process holds in memory of its own, in bytes:
// its resident set less the shared pages (statm's resident - shared, the
// anonymous part: heap, stacks). The pages of the executable are left out:
// they are the operator's too, and some kernels map them in large folios,
// so a worker that has allocated nothing can show more than its limit of
// them (a 180 MB binary at 130 MiB resident was seen).
func residentSize(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("/proc/%d/statm: unexpected %q", pid, b)
	}
	var rss, shared uint64
	if rss, err = strconv.ParseUint(f[1], 10, 64); err == nil {
		shared, err = strconv.ParseUint(f[2], 10, 64)
	}
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/statm: %w", pid, err)
	}
	return (rss - min(shared, rss)) * uint64(os.Getpagesize()), nil
}
