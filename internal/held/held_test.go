package held

import (
	"slices"
	"testing"
)

// The cache holds at most its bound, letting go of the least recently
// used first and telling of each key let go; a value larger than the
// bound is not kept, and its key is told of too.
func TestBound(t *testing.T) {
	var dropped []string
	c := New[string](10, func(key string) { dropped = append(dropped, key) })
	c.Put("a", "A", 4)
	c.Put("b", "B", 4)
	if _, ok := c.Get("a"); !ok { // a is now the most recently used
		t.Fatal("a not held")
	}
	c.Put("c", "C", 4) // 12 > 10: b goes
	if _, ok := c.Get("b"); ok || !slices.Equal(dropped, []string{"b"}) {
		t.Fatalf("b held after the bound passed; dropped %v", dropped)
	}
	if bytes, n := c.Stats(); bytes != 8 || n != 2 {
		t.Fatalf("stats %d bytes in %d entries", bytes, n)
	}
	c.Put("a", "A2", 11) // too large: a is let go, not kept
	if _, ok := c.Get("a"); ok || !slices.Equal(dropped, []string{"b", "a"}) {
		t.Fatalf("a value over the bound was kept; dropped %v", dropped)
	}
	c.Put("c", "C2", 2) // replaced, not added
	if v, _ := c.Get("c"); v != "C2" {
		t.Fatalf("c is %q", v)
	}
	if bytes, n := c.Stats(); bytes != 2 || n != 1 {
		t.Fatalf("stats %d bytes in %d entries", bytes, n)
	}
	c.Put("d", "D", 1)
	c.Keep(func(k string) bool { return k == "d" })
	c.Delete("d")
	if bytes, n := c.Stats(); bytes != 0 || n != 0 {
		t.Fatalf("after Keep and Delete: %d bytes in %d entries", bytes, n)
	}
}
