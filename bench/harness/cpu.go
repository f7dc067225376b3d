package harness

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// CPUTimes are the machine's CPU time counters (/proc/stat's first line,
// in clock ticks, all cores together): busy and idle (idle and iowait).
type CPUTimes struct{ Busy, Idle uint64 }

// ReadCPUTimes reads the machine's CPU time counters.
func ReadCPUTimes() (CPUTimes, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return CPUTimes{}, errors.New("/proc/stat: no cpu line")
	}
	var t CPUTimes
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// counted in user and nice already]
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}, err
		}
		if i == 3 || i == 4 {
			t.Idle += v
		} else {
			t.Busy += v
		}
	}
	return t, nil
}

// BusySince is the share of the machine's CPU time that was busy between
// from and t, 0 to 1 (0 when no time passed).
func (t CPUTimes) BusySince(from CPUTimes) float64 {
	busy, idle := t.Busy-from.Busy, t.Idle-from.Idle
	if busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle)
}
