package main

import (
	"testing"
	"testing/fstest"
)

func TestCgroupMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, c := range []struct {
		name  string
		fsys  fstest.MapFS
		limit int64
		ok    bool
	}{
		{"v2 container", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("805306368\n"),
		}, 768 << 20, true},
		{"v2 no limit", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0, false},
		{"v2 own cgroup", fstest.MapFS{
			"proc/self/cgroup":                          file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("536870912\n"),
		}, 512 << 20, true},
		{"v1", fstest.MapFS{
			"proc/self/cgroup": file("5:cpu,cpuacct:/\n4:memory:/job/7\n0::/\n"),
			"sys/fs/cgroup/memory/job/7/memory.limit_in_bytes": file("1073741824\n"),
		}, 1 << 30, true},
		{"v1 container root", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("1073741824\n"),
		}, 1 << 30, true},
		{"v1 no limit", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0, false},
		{"no cgroups", fstest.MapFS{}, 0, false},
	} {
		limit, ok := cgroupMemoryLimit(c.fsys)
		if limit != c.limit || ok != c.ok {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, limit, ok, c.limit, c.ok)
		}
	}
}

func TestSoftMemoryLimit(t *testing.T) {
	// The Deployment's: 768Mi for the operator and two workers of 256Mi.
	if got := softMemoryLimit(768<<20, 2*256<<20); got != 256<<20/10*9 {
		t.Errorf("768Mi less two workers of 256Mi: %d MiB", got>>20)
	}
	if got := softMemoryLimit(512<<20, 2*256<<20); got != 0 {
		t.Errorf("nothing left by the workers: %d", got)
	}
	f := &evalWorkerFlags{workers: 2, memoryLimit: "256Mi"}
	if got := f.budget(); got != 512<<20 {
		t.Errorf("two workers of 256Mi: budget %d", got)
	}
	f.inProcess = true
	if got := f.budget(); got != 0 {
		t.Errorf("in process: budget %d", got)
	}
}
