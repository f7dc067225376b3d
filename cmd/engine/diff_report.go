package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/manifestsync/manifestsync/internal/plural"
)

// baseReport is what diff --base found, from which every format is
// written. Its JSON form is -o json, documented in diff's help.
type baseReport struct {
	Base   string      `json:"base"`   // the revision as given
	Commit string      `json:"commit"` // its commit hash
	Syncs  []*syncDiff `json:"syncs"`
	// Errors are the targets that failed to evaluate on either side.
	Errors []string `json:"errors"`
}

// syncDiff is one ManifestSync: on both sides (changed or unchanged), or
// on one (added, removed).
type syncDiff struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace,omitempty"`
	File      string        `json:"file"`
	Status    string        `json:"status"`
	Targets   []*targetDiff `json:"targets"`
}

// targetDiff is one target of a ManifestSync and its changed objects.
type targetDiff struct {
	Target  string        `json:"target"`
	Added   int           `json:"added"`
	Removed int           `json:"removed"`
	Changed int           `json:"changed"`
	Error   string        `json:"error,omitempty"`
	Objects []*objectDiff `json:"objects"`
}

// objectDiff is one object that differs: its unified diff.
type objectDiff struct {
	Object string `json:"object"` // "Kind namespace/name"
	Group  string `json:"group,omitempty"`
	Change string `json:"change"` // added, removed or changed
	Diff   string `json:"diff"`
}

func (t *targetDiff) changes() int { return t.Added + t.Removed + t.Changed }

func (s *syncDiff) changes() bool {
	for _, t := range s.Targets {
		if t.changes() > 0 {
			return true
		}
	}
	return false
}

// displayName is "namespace/name" of the ManifestSync.
func (s *syncDiff) displayName() string { return namespacedName(s.Namespace, s.Name) }

// totals counts the objects added, removed and changed in every target.
func (r *baseReport) totals() (added, removed, changed int) {
	for _, s := range r.Syncs {
		for _, t := range s.Targets {
			added, removed, changed = added+t.Added, removed+t.Removed, changed+t.Changed
		}
	}
	return added, removed, changed
}

// baseFormats are the formats of diff --base's -o, by name.
var baseFormats = map[string]func(io.Writer, *baseReport) error{
	"text":     writeBaseText,
	"markdown": writeBaseMarkdown,
	"json":     writeBaseJSON,
}

// writeBaseText writes, for each target with changes, a comment line
// naming it and its counts, then the unified diff of each object.
func writeBaseText(w io.Writer, r *baseReport) error {
	var b strings.Builder
	for _, s := range r.Syncs {
		for _, t := range s.Targets {
			if t.changes() == 0 {
				continue
			}
			fmt.Fprintf(&b, "# %s: ManifestSync %s (%s), target %s: %s\n", s.File, s.displayName(), s.Status, t.Target, counts(t))
			for _, o := range t.Objects {
				b.WriteString(o.Diff)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// counts words the counts of a target: "1 added, 0 removed, 2 changed".
func counts(t *targetDiff) string {
	return fmt.Sprintf("%d added, %d removed, %d changed", t.Added, t.Removed, t.Changed)
}

// writeBaseMarkdown writes a pull request comment: a table of the counts
// of every target with changes or an error, then a collapsed section per
// such target holding its diff.
func writeBaseMarkdown(w io.Writer, r *baseReport) error {
	var b strings.Builder
	short := r.Commit
	if len(short) > 12 {
		short = short[:12]
	}
	fmt.Fprintf(&b, "### ManifestSync diff against `%s` (%s)\n\n", r.Base, short)
	added, removed, changed := r.totals()
	targets, unchanged := 0, 0
	for _, s := range r.Syncs {
		for _, t := range s.Targets {
			targets++
			if t.changes() == 0 && t.Error == "" {
				unchanged++
			}
		}
	}
	if added+removed+changed == 0 && len(r.Errors) == 0 {
		fmt.Fprintf(&b, "No changes in %s of %s.\n", plural.Count(targets, "target"), plural.Count(len(r.Syncs), "ManifestSync"))
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString("| File | ManifestSync | Target | Added | Removed | Changed |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: |\n")
	for _, s := range r.Syncs {
		for _, t := range s.Targets {
			switch {
			case t.Error != "":
				fmt.Fprintf(&b, "| %s | %s | %s | error | error | error |\n", mdCell(s.File), mdCell(s.displayName()), mdCell(t.Target))
			case t.changes() > 0:
				fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d |\n", mdCell(s.File), mdCell(s.displayName()), mdCell(t.Target), t.Added, t.Removed, t.Changed)
			}
		}
	}
	fmt.Fprintf(&b, "\n%d added, %d removed, %d changed; %s unchanged.\n", added, removed, changed, plural.Count(unchanged, "target"))
	for _, s := range r.Syncs {
		for _, t := range s.Targets {
			if t.changes() == 0 && t.Error == "" {
				continue
			}
			what := counts(t)
			if t.Error != "" {
				what = "error"
			}
			fmt.Fprintf(&b, "\n<details>\n<summary>%s %s, target %s: %s</summary>\n\n", htmlText(s.File), htmlText(s.displayName()), htmlText(t.Target), what)
			var body strings.Builder
			lang := "diff"
			if t.Error != "" {
				body.WriteString(t.Error + "\n")
				lang = "text"
			}
			for _, o := range t.Objects {
				body.WriteString(o.Diff)
			}
			fence := strings.Repeat("`", max(3, longestRun(body.String(), '`')+1))
			fmt.Fprintf(&b, "%s%s\n%s%s\n\n</details>\n", fence, lang, body.String(), fence)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell escapes what would end a table cell.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// htmlText escapes text for HTML.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// longestRun is the length of the longest run of c in s, so that a code
// fence is longer than any run of backticks it holds.
func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

func writeBaseJSON(w io.Writer, r *baseReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
