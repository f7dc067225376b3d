package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/pmezard/go-difflib/difflib"
	"golang.org/x/term"

	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/worker"
	"github.com/manifestsync/manifestsync/internal/objdiff"
)

// watchDebounce is how long eval --watch waits after a change for the
// next one before it evaluates: an editor's save is often several writes,
// or a write and a rename.
const watchDebounce = 100 * time.Millisecond

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J\x1b[3J"

// watchEval evaluates, prints, and evaluates again whenever a file the
// evaluation read changes, until SIGINT or SIGTERM (exit status 0) or ctx
// ends. Every evaluation runs in pool, under its memory bound and timeout.
// On a terminal each render replaces the screen; otherwise renders are
// separated by "--- render N ---" lines. A render that fails shows its
// error and keeps the last good output.
func watchEval(ctx context.Context, pool *worker.Pool, namespaces givenNamespaces, stdout, stderr io.Writer, f *evalFlags) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("eval --watch: %w", err)
	}
	defer fw.Close()
	w := &watcher{fs: fw, dirs: map[string]bool{}, f: f, stdout: stdout, stderr: stderr, terminal: isTerminal(stdout)}
	// Notes (a source read from its local copy) are said once, not at
	// every render.
	notes := &newLines{w: stderr, seen: map[string]bool{}}
	for n := 1; ; n++ {
		var out bytes.Buffer
		run, err := evalOnce(ctx, pool, namespaces, &out, notes, f)
		if ctx.Err() != nil {
			return nil
		}
		// Watched before it is shown: a change made once the render is
		// seen is not missed.
		w.watch(run)
		w.show(n, out.String(), err)
		if !w.wait(ctx) {
			return nil
		}
	}
}

// watcher is the state of eval --watch between renders.
type watcher struct {
	fs       *fsnotify.Watcher
	dirs     map[string]bool // directories watched
	files    map[string]bool // files whose changes count: the sync file, one-file sources
	trees    []string        // directories whose every change counts: local sources
	f        *evalFlags
	stdout   io.Writer
	stderr   io.Writer
	terminal bool
	// last is the last good render's output, and good its number.
	last string
	good int
}

// show prints render n: its output, or its error and the last good
// output.
func (w *watcher) show(n int, out string, err error) {
	var b strings.Builder
	if w.terminal {
		b.WriteString(clearScreen)
	}
	switch {
	case err != nil && w.terminal:
		b.WriteString(w.last)
	case err != nil:
	case w.f.diff && w.good > 0:
		if !w.terminal {
			fmt.Fprintf(&b, "--- render %d ---\n", n)
		}
		if out == w.last {
			b.WriteString("(no change)\n")
		} else {
			_ = difflib.WriteUnifiedDiff(&b, difflib.UnifiedDiff{
				A: objdiff.Lines(w.last), B: objdiff.Lines(out),
				FromFile: fmt.Sprintf("render %d", w.good), ToFile: fmt.Sprintf("render %d", n),
				Context: 3,
			})
		}
	default:
		if !w.terminal {
			fmt.Fprintf(&b, "--- render %d ---\n", n)
		}
		b.WriteString(out)
	}
	_, _ = io.WriteString(w.stdout, b.String())
	if err == nil {
		w.last, w.good = out, n
		fmt.Fprintf(w.stderr, "%s: eval --watch: render %d at %s; watching for changes (Ctrl-C to stop)\n", programName, n, time.Now().Format(time.TimeOnly))
		return
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{err: err}
	}
	writeError(w.stderr, programName+": ", ee.err, ee.tree, colorOn(w.stderr))
	if w.good > 0 {
		fmt.Fprintf(w.stderr, "%s: eval --watch: render %d failed; keeping render %d, the last good one\n", programName, n, w.good)
	} else {
		fmt.Fprintf(w.stderr, "%s: eval --watch: render %d failed; no good render yet\n", programName, n)
	}
}

// watch makes the watched set what run read: the sync file, the local
// sources' directories (every directory that holds one of their files),
// and the files given with --source. Directories are watched rather than
// files, so that an editor that saves by renaming a new file over the old
// one is seen.
func (w *watcher) watch(run *evalRun) {
	files := map[string]bool{filepath.Clean(w.f.file): true}
	var trees []string
	dirs := map[string]bool{filepath.Dir(filepath.Clean(w.f.file)): true}
	for _, s := range w.f.sources {
		_, p, _ := strings.Cut(s, "=")
		if source.IsGitURL(p) {
			continue
		}
		p = filepath.Clean(p)
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			trees = append(trees, p)
			dirs[p] = true
		} else {
			files[p] = true
			dirs[filepath.Dir(p)] = true
		}
	}
	syncDir := filepath.Dir(filepath.Clean(w.f.file))
	if run != nil {
		for name, s := range run.snaps {
			if s == nil {
				continue
			}
			if s.Origin == "" {
				// A one-file source read beside the sync file (NAME.yaml).
				files[filepath.Join(syncDir, name+".yaml")] = true
				continue
			}
			root := filepath.Clean(s.Origin)
			trees = append(trees, root)
			dirs[root] = true
			for p := range s.Files {
				dirs[filepath.Dir(filepath.Join(root, filepath.FromSlash(p)))] = true
			}
		}
	}
	for d := range w.dirs {
		if !dirs[d] {
			_ = w.fs.Remove(d)
			delete(w.dirs, d)
		}
	}
	for d := range dirs {
		if w.dirs[d] {
			continue
		}
		if err := w.fs.Add(d); err != nil {
			// A directory that went away comes back with its parent's
			// event; it is tried again after the next render.
			continue
		}
		w.dirs[d] = true
	}
	w.files, w.trees = files, trees
}

// wait blocks until a change that counts has settled (no further one for
// watchDebounce); false when ctx ends first.
func (w *watcher) wait(ctx context.Context) bool {
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.fs.Events:
			if !ok {
				return false
			}
			if w.counts(ev.Name) {
				timer = time.After(watchDebounce)
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return false
			}
			fmt.Fprintf(w.stderr, "%s: eval --watch: %v\n", programName, err)
		case <-timer:
			return true
		}
	}
}

// counts says whether a change of name calls for a new render: the sync
// file, a one-file source, or anything in a local source's tree but an
// editor's scratch file.
func (w *watcher) counts(name string) bool {
	name = filepath.Clean(name)
	if w.files[name] {
		return true
	}
	base := filepath.Base(name)
	if strings.HasSuffix(base, "~") || strings.HasSuffix(base, ".swp") || strings.HasSuffix(base, ".swx") || strings.HasPrefix(base, ".#") || base == "4913" {
		return false
	}
	return slices.ContainsFunc(w.trees, func(t string) bool {
		return name == t || strings.HasPrefix(name, t+string(filepath.Separator))
	})
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newLines writes to w the lines it has not written before.
type newLines struct {
	w    io.Writer
	seen map[string]bool
}

func (n *newLines) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" && !n.seen[l] {
			n.seen[l] = true
			b.WriteString(l)
		}
	}
	_, err := io.WriteString(n.w, b.String())
	return len(p), err
}
