package harness

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Evict drops the executable bin from the page cache, so that the next
// process of it reads its pages in from the disk as a container's first
// start reads them from its image. How a binary got into the page cache
// changes the resident set of a process of it by a few MiB: the Go linker
// writes its output through a shared mapping, which leaves larger folios
// in the page cache than the reads of an exec make, and a process maps
// those whole. A benchmark that reads the peak RSS of a binary it has just
// built would otherwise measure a state no pod is ever in, and could
// compare two binaries in two different states. Pages a running process
// maps stay (the kernel drops only unmapped clean pages): Evict before
// each measured start.
func Evict(bin string) error {
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	// Dirty pages (a binary just written) are not dropped: write them
	// out first.
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("evicting %s from the page cache: %w", bin, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evicting %s from the page cache: %w", bin, err)
	}
	return nil
}
