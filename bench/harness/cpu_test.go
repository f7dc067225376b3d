package harness

import (
	"testing"
	"time"
)

// A spinning goroutine shows as busy time; the counters only grow.
func TestCPUTimes(t *testing.T) {
	from, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(stop) {
	}
	to, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	if to.Busy < from.Busy || to.Idle < from.Idle {
		t.Fatalf("counters went back: %+v then %+v", from, to)
	}
	// One of the machine's cores spun the whole time: at least its share,
	// less a tick's slack.
	if got := to.BusySince(from); got <= 0 || got > 1 {
		t.Errorf("busy share %v while spinning, want in (0, 1]", got)
	}
	if got := (CPUTimes{Busy: 3, Idle: 1}).BusySince(CPUTimes{Busy: 1, Idle: 1}); got != 1 {
		t.Errorf("2 busy ticks, 0 idle: %v, want 1", got)
	}
	if got := (CPUTimes{Busy: 2, Idle: 4}).BusySince(CPUTimes{Busy: 1, Idle: 1}); got != 0.25 {
		t.Errorf("1 busy tick, 3 idle: %v, want 0.25", got)
	}
	if got := from.BusySince(from); got != 0 {
		t.Errorf("no time: %v, want 0", got)
	}
}
