package harness

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

const holdEnv = "HARNESS_TEST_HOLD"

// TestMain makes the test binary, started with holdEnv set, a process that
// holds 64 MiB of anonymous memory for a moment.
func TestMain(m *testing.M) {
	if os.Getenv(holdEnv) != "" {
		b := make([]byte, 64<<20)
		for i := range b {
			b[i] = 1
		}
		time.Sleep(200 * time.Millisecond)
		runtime.KeepAlive(b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunProcessMemory: both the peak RSS and the peak RssAnon of a
// process that holds 64 MiB must see them.
func TestRunProcessMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdEnv+"=1")
	p, err := RunProcess(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if p.RSS < 64<<20 || p.Anon < 64<<20 {
		t.Errorf("peak RSS %d, RssAnon %d: want both at least 64 MiB", p.RSS, p.Anon)
	}
	if p.Anon > p.RSS {
		t.Errorf("RssAnon %d above the peak RSS %d", p.Anon, p.RSS)
	}
	if p.Wall < 200*time.Millisecond {
		t.Errorf("wall %v, less than the process slept", p.Wall)
	}
}
