package shard

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
)

// VirtualNodes is how many points each member has on the ring: enough that
// the ring's own share of each member is within a few percent of 1/N.
const VirtualNodes = 128

// Slack bounds the load of each member to within Slack of its fair share
// K/N, above and below (consistent hashing with bounded loads): with 0.06
// the most loaded of N members holds at most (1.06)² ≈ 1.12 times the least.
const Slack = 0.06

// hash is FNV-1a of s, finished with splitmix64's mixer so that short,
// similar strings (a member's virtual nodes, "ns/name-1", "ns/name-2")
// spread over the whole ring. It never changes: assignments depend on it.
func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Ring is a consistent hash ring of members, each placed at VirtualNodes
// points. The zero Ring has no members.
type Ring struct {
	points []point
}

type point struct {
	h      uint64
	member string
}

// NewRing places the members on a ring; duplicates count once.
func NewRing(members []string) *Ring {
	r := &Ring{}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m] {
			continue
		}
		seen[m] = true
		for i := range VirtualNodes {
			r.points = append(r.points, point{hash(m + "#" + strconv.Itoa(i)), m})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(a.member, b.member))
	})
	return r
}

// Owner is the member whose point follows key's hash on the ring, or ""
// when the ring is empty.
func (r *Ring) Owner(key string) string {
	if len(r.points) == 0 {
		return ""
	}
	return r.points[r.search(hash(key))].member
}

func (r *Ring) search(h uint64) int {
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.h, h) })
	if i == len(r.points) {
		i = 0
	}
	return i
}

// walk calls f with the distinct members in ring order from key's point,
// until f returns true.
func (r *Ring) walk(key string, f func(member string) bool) {
	if len(r.points) == 0 {
		return
	}
	seen := map[string]bool{}
	i := r.search(hash(key))
	for range len(r.points) {
		m := r.points[i].member
		if !seen[m] {
			seen[m] = true
			if f(m) {
				return
			}
		}
		i = (i + 1) % len(r.points)
	}
}

// Bounds are the least and most objects a member should hold, of total
// over n members.
func Bounds(total, n int) (lo, hi int) {
	if n == 0 {
		return 0, 0
	}
	fair := float64(total) / float64(n)
	return int(math.Floor(fair / (1 + Slack))), int(math.Ceil(fair * (1 + Slack)))
}

// Assign gives each key a member: its current owner while that one is a
// member, else the ring's choice; then, so that every member holds between
// Bounds' lo and hi keys, it moves keys from the most to the least loaded,
// preferring keys that have no owner yet (they move for free) and keys the
// ring places at the receiving member. Given the same arguments it returns
// the same assignment; a join moves about 1/N of the keys to the new
// member, a leave moves only the leaver's (unless the rest would fall out
// of bounds). current may be nil.
func Assign(keys, members []string, current map[string]string) map[string]string {
	out := make(map[string]string, len(keys))
	if len(members) == 0 {
		return out
	}
	ring := NewRing(members)
	live := map[string]bool{}
	for _, m := range members {
		live[m] = true
	}
	members = slices.Sorted(func(yield func(string) bool) {
		for m := range live {
			if !yield(m) {
				return
			}
		}
	})
	lo, hi := Bounds(len(keys), len(members))
	// Keys in hash order, so that which keys move does not depend on the
	// order the caller listed them in.
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(hash(a), hash(b)), cmp.Compare(a, b)) })
	keys = slices.Compact(keys)
	load := map[string]int{}
	free := map[string]bool{} // keys without a live owner before
	held := map[string][]string{}
	place := func(k, m string) { out[k] = m; load[m]++ }
	for _, k := range keys {
		if c := current[k]; live[c] {
			place(k, c)
			continue
		}
		free[k] = true
		// The ring's choice, or the next member on the ring with room.
		m := ""
		ring.walk(k, func(c string) bool {
			if m == "" {
				m = c
			}
			if load[c] < hi {
				m = c
				return true
			}
			return false
		})
		place(k, m)
	}
	for _, k := range keys {
		held[out[k]] = append(held[out[k]], k)
	}
	// move takes one key from member from to member to: a free key the
	// ring places at to, else any free key, else an owned key the ring
	// places at to, else the first owned key.
	move := func(from, to string) {
		ks := held[from]
		best, score := -1, -1
		for i, k := range ks {
			s := 0
			if free[k] {
				s += 2
			}
			if ring.Owner(k) == to {
				s++
			}
			if s > score {
				best, score = i, s
			}
			if s == 3 {
				break
			}
		}
		k := ks[best]
		held[from] = slices.Delete(ks, best, best+1)
		held[to] = append(held[to], k)
		load[from]--
		load[to]++
		out[k] = to
	}
	extreme := func(most bool) string {
		var pick string
		for _, m := range members {
			if pick == "" || (most && load[m] > load[pick]) || (!most && load[m] < load[pick]) {
				pick = m
			}
		}
		return pick
	}
	for {
		least, most := extreme(false), extreme(true)
		if load[least] >= lo && load[most] <= hi || load[most]-load[least] <= 1 {
			return out
		}
		move(most, least)
	}
}
