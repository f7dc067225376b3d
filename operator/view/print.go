package view

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xlab/treeprint"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/history"
)

// Options say how text is written.
type Options struct {
	// Color marks states with ANSI colours: green when all is well,
	// yellow for what waits or drifted, red for what failed. Set it only
	// for a terminal.
	Color bool
	// MessageWidth cuts messages in tables to that many characters; 0
	// does not cut them.
	MessageWidth int
}

// ANSI colours.
const (
	green  = "32"
	yellow = "33"
	red    = "31"
)

// colourOf is the colour of a state, a Ready status or a result; "" for
// none.
func colourOf(state string) string {
	switch state {
	case StateSynced, string(metav1.ConditionTrue), string(v1alpha1.HealthHealthy), string(health.Current): // StateSynced is also the reason Synced
		return green
	case StateDrifted, string(v1alpha1.TargetPending), string(metav1.ConditionUnknown), "Suspended",
		string(v1alpha1.HealthProgressing), string(health.InProgress), string(health.Terminating), string(health.NotFound):
		return yellow
	case StateMissing, string(v1alpha1.TargetFailed), string(v1alpha1.TargetConflict), string(metav1.ConditionFalse),
		string(v1alpha1.HealthDegraded), v1alpha1.ReasonHealthCheckFailed:
		return red
	}
	return ""
}

// paint colours s by the colour of state (s padded to width first, so
// that colour codes do not upset alignment).
func (o Options) paint(state, s string, width int) string {
	s = pad(s, width)
	c := colourOf(state)
	if !o.Color || c == "" {
		return s
	}
	trimmed := strings.TrimRight(s, " ")
	return "\x1b[" + c + "m" + trimmed + "\x1b[0m" + s[len(trimmed):]
}

func pad(s string, width int) string {
	if n := utf8.RuneCountInString(s); n < width {
		return s + strings.Repeat(" ", width-n)
	}
	return s
}

// cut shortens a message to width characters.
func (o Options) cut(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	if o.MessageWidth <= 3 || utf8.RuneCountInString(msg) <= o.MessageWidth {
		return msg
	}
	r := []rune(msg)
	return string(r[:o.MessageWidth-3]) + "..."
}

// table is rows of cells, written in columns two spaces apart.
type table struct {
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write writes the table; the cells of the columns named by coloured,
// below the first row, are coloured by their own text.
func (t *table) write(w io.Writer, o Options, coloured ...int) error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for n, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			if n > 0 && slices.Contains(coloured, i) {
				line.WriteString(o.paint(c, c, widths[i]))
			} else {
				line.WriteString(pad(c, widths[i]))
			}
			line.WriteString("  ")
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteTable writes one line per ManifestSync: namespace, name, ready,
// reason, targets synced/total, short revision, last sync, message.
func WriteTable(w io.Writer, items []Summary, o Options) error {
	var t table
	t.add("NAMESPACE", "NAME", "READY", "REASON", "TARGETS", "REVISION", "LAST SYNC", "MESSAGE")
	for _, s := range items {
		ready := s.Ready
		if s.Suspended {
			ready += ",Suspended"
		}
		t.add(s.Namespace, s.Name, ready, dash(s.Reason), fmt.Sprintf("%d/%d", s.TargetsSynced, s.TargetsTotal),
			dash(v1alpha1.ShortRevision(s.Revision)), when(s.LastSync), dash(o.cut(s.Message)))
	}
	return t.write(w, o, 2)
}

// WriteDetail writes a ManifestSync in full: a header (ready, reason,
// message, revision, inputs), a tree of its objects per target, and its
// history entries.
func WriteDetail(w io.Writer, d Detail, o Options) error {
	var b strings.Builder
	fmt.Fprintf(&b, "ManifestSync %s/%s\n", d.Namespace, d.Name)
	var h table
	ready := o.paint(d.Ready, d.Ready, 0)
	if d.Reason != "" {
		ready += " (" + o.paint(d.Reason, d.Reason, 0) + ")"
	}
	h.add("  Ready:", ready)
	if d.Suspended {
		h.add("  Suspended:", o.paint("Suspended", "true", 0))
	}
	if d.Message != "" {
		h.add("  Message:", d.Message)
	}
	if d.Healthy != "" {
		healthy := o.paint(d.Healthy, d.Healthy, 0) + " (" + o.paint(d.HealthReason, d.HealthReason, 0) + ")"
		if d.HealthMessage != "" && d.Healthy != string(metav1.ConditionTrue) {
			healthy += ": " + o.cut(d.HealthMessage)
		}
		h.add("  Healthy:", healthy)
	}
	h.add("  Revision:", dash(d.Revision))
	h.add("  Last sync:", when(d.LastSync))
	h.add("  Targets:", fmt.Sprintf("%d/%d synced", d.TargetsSynced, d.TargetsTotal))
	if in := d.Inputs; in != nil {
		h.add("  Inputs:", "")
		for _, name := range slices.Sorted(maps.Keys(in.Sources)) {
			h.add("    source "+name, in.Sources[name])
		}
		for _, p := range []struct{ k, v string }{{"transform", in.Transform}, {"schemas", in.Schemas}, {"params", in.Params}} {
			if p.v != "" {
				h.add("    "+p.k, p.v)
			}
		}
	}
	if err := h.write(&b, Options{}); err != nil {
		return err
	}

	b.WriteString("\n")
	tree := treeprint.NewWithRoot("Targets")
	for _, t := range d.Targets {
		where := t.Namespace
		if t.Cluster != "" {
			where = t.Cluster + "/" + t.Namespace
		}
		line := fmt.Sprintf("%s (%s)  %s  %s", t.Name, where, o.paint(t.State, t.State, 0), plural.Count(len(t.Objects), "object"))
		if t.Health != "" {
			line = fmt.Sprintf("%s (%s)  %s  %s  %s", t.Name, where, o.paint(t.State, t.State, 0), o.paint(t.Health, t.Health, 0), plural.Count(len(t.Objects), "object"))
		}
		if t.Message != "" {
			line += "  " + o.cut(t.Message)
		}
		branch := tree.AddBranch(line)
		width, stateWidth := 0, 0
		for _, obj := range t.Objects {
			width = max(width, utf8.RuneCountInString(obj.Object))
			stateWidth = max(stateWidth, utf8.RuneCountInString(obj.State))
		}
		for _, obj := range t.Objects {
			node := pad(obj.Object, width) + "  " + o.paint(obj.State, obj.State, stateWidth)
			if obj.Health != "" {
				node += "  " + o.paint(obj.Health, obj.Health, 0)
				if obj.Health != string(health.Current) && obj.HealthMessage != "" {
					node += "  " + o.cut(obj.HealthMessage)
				}
			}
			branch.AddNode(strings.TrimRight(node, " "))
		}
	}
	b.WriteString(tree.String())

	if len(d.History) > 0 {
		b.WriteString("\nHistory\n")
		ms := &v1alpha1.ManifestSync{Status: v1alpha1.ManifestSyncStatus{History: d.History}}
		if err := history.Write(&b, ms); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// when is a time for people, in UTC; "-" for none.
func when(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
