package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/worker"
)

// TestEvalWorkerCommand runs evaluations in `engine eval-worker`
// processes (the test binary, as testscript puts it on $PATH): a memory
// bomb is stopped at its limit and the next evaluation succeeds.
func TestEvalWorkerCommand(t *testing.T) {
	exe, err := exec.LookPath(programName)
	if err != nil {
		t.Skipf("no %s on $PATH: %v", programName, err)
	}
	f := &evalWorkerFlags{workers: 1, memoryLimit: testWorkerLimit, opts: worker.Options{Command: []string{exe, "eval-worker"}}}
	ev, stop, err := f.evaluator()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dir := "../../examples/starlark-app"
	sf, err := readSyncFile(context.Background(), 0, filepath.Join(dir, "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := source.Dir(filepath.Join(dir, "app"), source.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	good := engine.Spec{Sync: &sf.Sync.Spec, Snapshots: map[string]*engine.Snapshot{"app": snap}}
	bomb := engine.Spec{Sync: &v1alpha1.ManifestSyncSpec{
		Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: "x = \"a\" * (1 << 29)\ny = [x + x] * 8\ndef main(ctx):\n    return []\n"}},
		Targets:   []v1alpha1.Target{{Name: "dev", Namespace: "dev"}},
	}}
	ctx := context.Background()
	limit := strings.TrimSuffix(testWorkerLimit, "Mi") + " MiB"
	if _, err := ev.Evaluate(ctx, bomb, engine.Options{}); err == nil || err.Error() != "evaluation exceeded its memory limit of "+limit {
		t.Errorf("memory bomb: got %v", err)
	}
	want, err := engine.Evaluate(ctx, good, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ev.Evaluate(ctx, good, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != want.Revision || got.Targets[0].Digest != want.Targets[0].Digest {
		t.Errorf("revision %s, want %s", got.Revision, want.Revision)
	}
	if f := (&evalWorkerFlags{workers: 1, memoryLimit: "lots"}); !strings.Contains(errString(f), "--eval-memory-limit") {
		t.Errorf("a bad limit: %s", errString(f))
	}
	if f := (&evalWorkerFlags{workers: 1, memoryLimit: "64Mi", opts: worker.Options{IdleTimeout: -time.Second}}); !strings.Contains(errString(f), "--eval-idle-timeout -1s") {
		t.Errorf("a negative idle timeout: %s", errString(f))
	}
}

func errString(f *evalWorkerFlags) string {
	_, _, err := f.evaluator()
	if err == nil {
		return ""
	}
	return err.Error()
}
