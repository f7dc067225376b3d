// Package history reads a ManifestSync's status.history and goes back to
// one of its entries: a rollback pins every git source to the commit the
// entry evaluated (spec.sources[].git.ref.commit) and records the refs it
// replaced in an annotation, so that it can be undone. It is what `engine
// history` and `engine rollback` do; editing ref.commit with kubectl has
// the same effect.
//
// Only the sources' revisions are restored. Object sources cannot be
// pinned (their past content is not stored), and a change of the spec
// itself (params, targets, an inline transform) is not reverted; a
// rollback says so for each of them. What came from git (a transform or
// schemas in a git source) is restored with the pin.
//
// It uses a client but not the controller: it only edits the spec, which
// the operator then reconciles.
package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Annotation, on a ManifestSync, records the refs a rollback replaced, as
// JSON (a Record). Undo restores them and removes it.
const Annotation = "manifestsync.dev/rolled-back-from"

// Record is the value of Annotation.
type Record struct {
	// Revision is that of the history entry rolled back to.
	Revision string `json:"revision"`
	// Refs are the refs of the pinned sources before the first of the
	// rollbacks since the last undo, by source name.
	Refs map[string]v1alpha1.GitRef `json:"refs"`
}

// Change is one git source's ref changing.
type Change struct {
	Source   string
	From, To v1alpha1.GitRef
}

// Result says what a rollback or an undo changed, and what it could not
// restore.
type Result struct {
	// Entry is the history entry rolled back to; nil for an undo.
	Entry   *v1alpha1.HistoryEntry
	Changes []Change
	// Notes are what was not restored, one sentence each.
	Notes []string
}

// Complete reports whether everything the entry evaluated was restored.
func (r *Result) Complete() bool { return len(r.Notes) == 0 }

// hashPattern finds the commit of a git source's revision: "main@sha1:H",
// "v1.2.0@sha1:H" or "sha1:H".
var hashPattern = regexp.MustCompile(`(?:^|@)sha1:([0-9a-f]{7,40})$`)

// CommitOf returns the commit of a git revision ("main@sha1:H", "sha1:H",
// behind the digest of its refs or not): what a rollback pins, and what the
// web UI compares two entries by.
func CommitOf(revision string) (string, bool) {
	m := hashPattern.FindStringSubmatch(revision)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Pin changes ms (in memory) so that its git sources are pinned to the
// commits of status.history[n]; 0 is the newest entry.
func Pin(ms *v1alpha1.ManifestSync, n int) (*Result, error) {
	h := ms.Status.History
	if n < 0 || n >= len(h) {
		return nil, fmt.Errorf("ManifestSync %s/%s has no history entry %d: it has %d (0 is the newest)", ms.Namespace, ms.Name, n, len(h))
	}
	entry := h[n].DeepCopy()
	if entry.Inputs == nil {
		return nil, fmt.Errorf("history entry %d records no inputs", n)
	}
	rec, err := recordOf(ms)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		rec = &Record{Refs: map[string]v1alpha1.GitRef{}}
	}
	rec.Revision = entry.Revision
	res := &Result{Entry: entry}
	inSpec := map[string]bool{}
	for i := range ms.Spec.Sources {
		src := &ms.Spec.Sources[i]
		inSpec[src.Name] = true
		rev, ok := entry.Inputs.Sources[src.Name]
		switch {
		case src.Kustomize != nil:
			// Follows the source it builds from.
		case !ok:
			res.Notes = append(res.Notes, fmt.Sprintf("source %q was added after that entry: left as it is", src.Name))
		case src.Objects != nil:
			if cur := currentRevision(ms, src.Name); cur != rev {
				res.Notes = append(res.Notes, fmt.Sprintf("source %q is a set of objects: objects cannot be pinned, it stays as it is live (that entry read %s)", src.Name, rev))
			}
		case src.Object != nil:
			if cur := currentRevision(ms, src.Name); cur != rev {
				id := v1alpha1.ObjectID{Namespace: cmp.Or(src.Object.Namespace, ms.Namespace), Name: src.Object.Name, Kind: src.Object.Kind}
				res.Notes = append(res.Notes, fmt.Sprintf("source %q is an object (%s): objects cannot be pinned, it stays as it is live (that entry read %s)",
					src.Name, id, rev))
			}
		case src.Git != nil:
			commit, ok := CommitOf(rev)
			if !ok {
				return nil, fmt.Errorf("source %q: history entry %d: revision %q names no commit", src.Name, n, rev)
			}
			to := v1alpha1.GitRef{Commit: commit}
			if _, recorded := rec.Refs[src.Name]; !recorded {
				rec.Refs[src.Name] = src.Git.Ref
			}
			if src.Git.Ref != to {
				res.Changes = append(res.Changes, Change{Source: src.Name, From: src.Git.Ref, To: to})
				src.Git.Ref = to
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(entry.Inputs.Sources)) {
		if !inSpec[name] {
			res.Notes = append(res.Notes, fmt.Sprintf("source %q of that entry is no longer in the spec", name))
		}
	}
	res.Notes = append(res.Notes, specNotes(ms, entry)...)
	if len(rec.Refs) == 0 {
		return res, nil // no git source: nothing to record
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if ms.Annotations == nil {
		ms.Annotations = map[string]string{}
	}
	ms.Annotations[Annotation] = string(raw)
	return res, nil
}

// currentRevision is the revision of a source in the last evaluation.
func currentRevision(ms *v1alpha1.ManifestSync, name string) string {
	if ms.Status.Inputs == nil {
		return ""
	}
	return ms.Status.Inputs.Sources[name]
}

// specNotes names the inputs of the entry that came from the spec and
// differ from the last evaluation's: pinning cannot restore them.
func specNotes(ms *v1alpha1.ManifestSync, entry *v1alpha1.HistoryEntry) []string {
	cur := ms.Status.Inputs
	if cur == nil {
		return nil
	}
	var notes []string
	if cur.Params != entry.Inputs.Params {
		notes = append(notes, "spec.params or spec.targets changed since that entry: a rollback does not revert the spec")
	}
	if t := ms.Spec.Transform; t != nil && cur.Transform != entry.Inputs.Transform &&
		((t.Starlark != nil && t.Starlark.Inline != "") || (t.CUE != nil && t.CUE.Inline != "")) {
		notes = append(notes, "the inline transform changed since that entry: a rollback does not revert the spec")
	}
	if cur.Schemas != entry.Inputs.Schemas && slices.ContainsFunc(ms.Spec.Schemas, func(s v1alpha1.SchemaRef) bool { return s.Builtin != "" }) {
		notes = append(notes, "the schemas changed since that entry: those of git sources are restored, builtin ones come with the operator")
	}
	return notes
}

// Unpin changes ms (in memory) back to the refs its last rollbacks
// replaced, and removes Annotation.
func Unpin(ms *v1alpha1.ManifestSync) (*Result, error) {
	rec, err := recordOf(ms)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("ManifestSync %s/%s is not rolled back: it has no annotation %s", ms.Namespace, ms.Name, Annotation)
	}
	res := &Result{}
	for _, name := range slices.Sorted(maps.Keys(rec.Refs)) {
		i := slices.IndexFunc(ms.Spec.Sources, func(s v1alpha1.Source) bool { return s.Name == name })
		if i < 0 || ms.Spec.Sources[i].Git == nil {
			res.Notes = append(res.Notes, fmt.Sprintf("source %q is no longer a git source of the spec", name))
			continue
		}
		g := ms.Spec.Sources[i].Git
		if g.Ref != rec.Refs[name] {
			res.Changes = append(res.Changes, Change{Source: name, From: g.Ref, To: rec.Refs[name]})
			g.Ref = rec.Refs[name]
		}
	}
	delete(ms.Annotations, Annotation)
	return res, nil
}

// recordOf reads Annotation; nil when it is absent.
func recordOf(ms *v1alpha1.ManifestSync) (*Record, error) {
	raw, ok := ms.Annotations[Annotation]
	if !ok {
		return nil, nil
	}
	var rec Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", Annotation, err)
	}
	if rec.Refs == nil {
		rec.Refs = map[string]v1alpha1.GitRef{}
	}
	return &rec, nil
}

// Rollback pins the ManifestSync key to status.history[n] in the cluster.
func Rollback(ctx context.Context, c client.Client, key client.ObjectKey, n int) (*Result, error) {
	return update(ctx, c, key, func(ms *v1alpha1.ManifestSync) (*Result, error) { return Pin(ms, n) })
}

// Undo restores the refs the last rollbacks of the ManifestSync key
// replaced.
func Undo(ctx context.Context, c client.Client, key client.ObjectKey) (*Result, error) {
	return update(ctx, c, key, Unpin)
}

// update reads the ManifestSync, changes it and writes the change as a JSON
// merge patch that holds only if nobody wrote in between, retrying when
// somebody did.
func update(ctx context.Context, c client.Client, key client.ObjectKey, change func(*v1alpha1.ManifestSync) (*Result, error)) (*Result, error) {
	var res *Result
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &v1alpha1.ManifestSync{}
		if err := c.Get(ctx, key, ms); err != nil {
			return err
		}
		orig := ms.DeepCopy()
		var err error
		if res, err = change(ms); err != nil {
			return err
		}
		if len(res.Changes) == 0 && maps.Equal(orig.Annotations, ms.Annotations) {
			return nil
		}
		return c.Patch(ctx, ms, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ErrNoHistory is returned by Write for a ManifestSync without history.
var ErrNoHistory = errors.New("no history yet")

// Write lists status.history as a table, numbered as Pin takes them: 0
// is the newest. Each row has the time, the result, the short revision
// and every source's revision (commits shortened to 12 digits).
func Write(w io.Writer, ms *v1alpha1.ManifestSync) error {
	if len(ms.Status.History) == 0 {
		return ErrNoHistory
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "N\tTIME\tRESULT\tREVISION\tSOURCES")
	for i, e := range ms.Status.History {
		var sources []string
		if e.Inputs != nil {
			for _, name := range slices.Sorted(maps.Keys(e.Inputs.Sources)) {
				sources = append(sources, name+"="+shortSource(e.Inputs.Sources[name]))
			}
		}
		when := "-"
		if !e.Time.IsZero() {
			when = e.Time.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i, when, orDash(e.Result), orDash(v1alpha1.ShortRevision(e.Revision)), orDash(strings.Join(sources, " ")))
	}
	return tw.Flush()
}

// shortSource shortens the commit of a git revision to 12 digits.
func shortSource(rev string) string {
	if m := hashPattern.FindStringSubmatchIndex(rev); m != nil && m[3]-m[2] > 12 {
		return rev[:m[2]+12]
	}
	return rev
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
