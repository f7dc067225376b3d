package main

import (
	"bufio"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// A soft memory limit for the operator's Go runtime. The runtime honours
// GOMEMLIMIT (and GOGC) itself; when GOMEMLIMIT is not set and the
// operator runs under a cgroup memory limit (a container's
// resources.limits.memory), the operator sets one from it, so that its
// collector works harder before the kernel's OOM killer steps in. The
// evaluation workers live in the same cgroup, each up to
// --eval-memory-limit: the operator's share is what they leave, less a
// tenth for what the runtime does not count (binary pages, other
// processes). Nothing else is tuned: without a cgroup limit the runtime
// keeps its defaults.

// softMemoryLimit is the operator's soft limit under a cgroup limit of
// cgroup bytes, its workers taking up to workers bytes; 0 sets none (the
// workers would leave too little to be worth bounding).
func softMemoryLimit(cgroup, workers int64) int64 {
	own := (cgroup - workers) / 10 * 9
	if own < 32<<20 {
		return 0
	}
	return own
}

// unlimited is the least cgroup v1 limit that means none (the kernel
// reports "no limit" as a page-rounded maximum of int64).
const unlimited = 1 << 62

// cgroupMemoryLimit is the memory limit of this process's cgroup, read
// from fsys (the root of the file system): cgroup v2's memory.max or v1's
// memory.limit_in_bytes, of its own cgroup or, in a container whose
// cgroup is mounted as the root, of the mount's root. ok is false when
// there is none.
func cgroupMemoryLimit(fsys fs.FS) (limit int64, ok bool) {
	f, err := fsys.Open("proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var candidates []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := strings.TrimPrefix(path.Clean(parts[2]), "/")
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			candidates = append(candidates, path.Join("sys/fs/cgroup", dir, "memory.max"), "sys/fs/cgroup/memory.max")
		case hasController(parts[1], "memory"): // v1
			candidates = append(candidates, path.Join("sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"), "sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	for _, name := range candidates {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(raw))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
