package ui

import "testing"

// A stream opened after its page was read starts with what changed in
// between (the page's cursor); a cursor the store cannot answer for (too
// old, another process's, from the future) is told that something
// changed, never nothing.
func TestStreamCursor(t *testing.T) {
	st := newStore()
	st.publish(change{Kind: "ManifestSync", Namespace: "a", Name: "one"})
	page := st.now()
	st.publish(change{Kind: "ManifestSync", Namespace: "a", Name: "two"})
	st.publish(change{Kind: "ManifestSync", Namespace: "b", Name: "three"})

	back, ok := parseCursor(page.String())
	if !ok || back != page {
		t.Fatalf("parseCursor(%q) = %v, %v", page, back, ok)
	}
	sub, missed, lost := st.subscribe(back, true)
	st.unsubscribe(sub)
	if lost || len(missed) != 2 || missed[0].Name != "two" || missed[1].Name != "three" {
		t.Errorf("since the page: missed %v, lost %v; want two and three", missed, lost)
	}
	sub, missed, lost = st.subscribe(st.now(), true)
	st.unsubscribe(sub)
	if lost || len(missed) != 0 {
		t.Errorf("since now: missed %v, lost %v; want nothing", missed, lost)
	}
	sub, missed, lost = st.subscribe(cursor{}, false)
	st.unsubscribe(sub)
	if lost || len(missed) != 0 {
		t.Errorf("without a cursor: missed %v, lost %v; want nothing", missed, lost)
	}
	for _, c := range []cursor{
		{epoch: "other", seq: 1},                 // another process's
		{epoch: st.epoch, seq: st.now().seq + 5}, // not yet published
	} {
		sub, missed, lost = st.subscribe(c, true)
		st.unsubscribe(sub)
		if !lost || len(missed) != 0 {
			t.Errorf("since %v: missed %v, lost %v; want lost", c, missed, lost)
		}
	}
	for range recentChanges {
		st.publish(change{Kind: "ManifestSync", Namespace: "c", Name: "many"})
	}
	sub, missed, lost = st.subscribe(page, true)
	st.unsubscribe(sub)
	if !lost || len(missed) != 0 {
		t.Errorf("since a page older than the changes kept: missed %d, lost %v; want lost", len(missed), lost)
	}
	if len(st.recent) != recentChanges {
		t.Errorf("the store keeps %d changes, want %d", len(st.recent), recentChanges)
	}
	for _, s := range []string{"", "x", "-1", "e-", "e-x"} {
		if _, ok := parseCursor(s); ok {
			t.Errorf("parseCursor(%q) accepted", s)
		}
	}
}
