package soak

import (
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The checks themselves, without a cluster: each can fail.

func newTestRun(t *testing.T) *run {
	r := &run{t: t, f: newFleet(rand.New(rand.NewPCG(1, 2))), start: time.Now()}
	r.mon = newMonitor(r)
	return r
}

func TestScheduleIsReplayableAndComplete(t *testing.T) {
	draw := func(seed uint64) []*fault {
		return schedule(rand.New(rand.NewPCG(seed, 0x50a4)), 1, time.Minute)
	}
	a, b := draw(7), draw(7)
	if len(a) != len(b) {
		t.Fatalf("seed 7 drew %d then %d faults", len(a), len(b))
	}
	kinds := map[faultKind]bool{}
	for i := range a {
		if a[i].kind != b[i].kind || a[i].at != b[i].at || a[i].dur != b[i].dur || a[i].seed != b[i].seed {
			t.Fatalf("fault %d differs between two draws of seed 7: %+v, %+v", i, a[i], b[i])
		}
		if end := a[i].at + a[i].dur; end > time.Minute {
			t.Errorf("%s ends %v into a phase of 1m", a[i], end)
		}
		kinds[a[i].kind] = true
	}
	for k := range numFaultKinds {
		switch k {
		case faultChurnSecret, faultChurnConfigMap, faultChurnGit, faultChurnNamespace:
		case faultAPIServer, faultAPIServerKill:
			if !kinds[faultAPIServer] && !kinds[faultAPIServerKill] {
				t.Error("a phase of 1m stops no API server")
			}
		default:
			if !kinds[k] {
				t.Errorf("a phase of 1m has no %s", k)
			}
		}
	}
	for _, f := range schedule(rand.New(rand.NewPCG(9, 0x50a4)), 1, 3*time.Minute) {
		if f.at < 0 || f.at+f.dur > 3*time.Minute {
			t.Errorf("%s runs from %v to %v of a phase of 3m", f, f.at, f.at+f.dur)
		}
	}
	if slices.EqualFunc(a, draw(8), func(x, y *fault) bool { return x.at == y.at }) {
		t.Error("seeds 7 and 8 drew the same schedule")
	}
}

func TestScanFindsSecretValues(t *testing.T) {
	r := newTestRun(t)
	var secret string
	r.f.change(func() { secret = r.f.newSecret(rand.New(rand.NewPCG(3, 4))) })
	r.mon.scan(time.Now(), "clean line", `{"msg":"synced","result":"Synced"}`)
	r.mon.scan(time.Now(), "raw line", `{"error":"int: invalid literal \"`+secret+`\""}`)
	r.mon.scan(time.Now(), "base64 line", `{"data":{"token":"`+base64.StdEncoding.EncodeToString([]byte(secret))+`"}}`)
	var places []string
	for _, v := range r.mon.violations {
		places = append(places, v.what)
		if v.inv != invSecrets {
			t.Errorf("%s: invariant %q, want %q", v.what, v.inv, invSecrets)
		}
		if strings.Contains(v.detail, secret) || strings.Contains(v.detail, base64.StdEncoding.EncodeToString([]byte(secret))) {
			t.Errorf("the report of %s shows the Secret value: %s", v.what, v.detail)
		}
	}
	if want := []string{"raw line", "base64 line"}; !slices.Equal(places, want) {
		t.Errorf("leaks found in %q, want %q", places, want)
	}
}

func TestWriteBudget(t *testing.T) {
	r := newTestRun(t)
	var steady, edited, warring objKey
	r.f.change(func() {
		keys := slices.Collect(func(yield func(objKey) bool) {
			for k := range r.f.desiredSince {
				if !yield(k) {
					return
				}
			}
		})
		slices.SortFunc(keys, func(a, b objKey) int { return strings.Compare(a.String(), b.String()) })
		steady, edited, warring = keys[0], keys[1], keys[2]
		r.f.edits[edited] = 3
	})
	now := time.Now()
	write := func(k objKey, n int) {
		for i := range n {
			r.mon.writes[k] = append(r.mon.writes[k], now.Add(time.Duration(i)*time.Second))
		}
	}
	write(steady, 1+writeSlack)  // within 1 creation + slack
	write(edited, 1+2*3)         // a creation, three edits and their corrections
	write(warring, 4+writeSlack) // more than it may
	r.mon.checkWrites()
	if len(r.mon.violations) != 1 || r.mon.violations[0].what != warring.String() || r.mon.violations[0].inv != invWriteWar {
		t.Fatalf("violations %+v, want one write war of %s", r.mon.violations, warring)
	}
}

// TestOverlappingKillsLeaveOneOperator: two kill -9 faults that overlap
// both restart the operator; one process may run afterwards, never two
// (two operators without leader election fight over every object: a
// write war the soak once blamed on the operator).
func TestOverlappingKillsLeaveOneOperator(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-operator")
	// Each start leaves a file named by its pid, and runs until killed.
	script := "#!/bin/sh\ntouch " + dir + "/pid.$$\nexec sleep 60\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &operatorProc{bin: bin, logPath: filepath.Join(dir, "log")}
	if err := o.start(); err != nil {
		t.Fatal(err)
	}
	defer o.stop()
	var wg sync.WaitGroup
	for _, pause := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := o.kill9()
			time.Sleep(pause)
			if err = errors.Join(err, o.start()); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(50 * time.Millisecond) // the second kill while the first waits
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // each started script has touched its file
	pids, err := filepath.Glob(filepath.Join(dir, "pid.*"))
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, p := range pids {
		pid, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "pid."))
		if syscall.Kill(pid, 0) == nil {
			alive++
		}
	}
	if alive != 1 {
		t.Fatalf("%d operator processes run after two overlapping kill -9 faults (%d started), want 1", alive, len(pids))
	}
}
