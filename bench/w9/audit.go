package w9

import (
	"slices"
	"time"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// Double is a ConfigMap written by two replicas within the window: the
// closest such pair of its writes.
type Double struct {
	Object        string // namespace/name
	First, Second string // the users, in order
	At            time.Time
	Apart         time.Duration
}

// WriteStats are what DoubleWrites counted.
type WriteStats struct {
	// Writes are the successful writes of ConfigMaps by the replicas;
	// Objects the ConfigMaps they wrote.
	Writes, Objects int
	// Moved are the ConfigMaps written by more than one replica, and
	// Closest the shortest time between two writes of one ConfigMap by
	// two replicas (0 when none was).
	Moved   int
	Closest time.Duration
	// Users are the replicas that wrote.
	Users int
}

// DoubleWrites reads the audit events of the API server and returns the
// ConfigMaps (by namespace/name) written by two different users that
// replica accepts within window of each other, each once, at its closest
// pair. A write is a create, update, patch or delete the API server
// accepted (a 2xx answer); an apply that changed nothing counts too, as
// the request was sent. Two writes by one user never count: one owner
// writing an object twice is a sync, not two owners.
func DoubleWrites(events []testenv.AuditEvent, replica func(user string) bool, window time.Duration) ([]Double, WriteStats) {
	type write struct {
		user string
		at   time.Time
	}
	writes := map[string][]write{}
	users := map[string]bool{}
	var st WriteStats
	for _, ev := range events {
		if ev.ObjectRef.Resource != "configmaps" || ev.ObjectRef.Subresource != "" || ev.ObjectRef.Name == "" ||
			ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code >= 300 || !replica(ev.User.Username) {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete":
		default:
			continue
		}
		k := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		writes[k] = append(writes[k], write{ev.User.Username, ev.RequestReceivedTimestamp})
		users[ev.User.Username] = true
		st.Writes++
	}
	st.Objects, st.Users = len(writes), len(users)
	var doubles []Double
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range writes {
			if !yield(k) {
				return
			}
		}
	}) {
		ws := writes[k]
		slices.SortStableFunc(ws, func(a, b write) int { return a.at.Compare(b.at) })
		var closest *Double
		moved := false
		// Consecutive writes suffice: of two writers within the window,
		// some two consecutive writes by different users are within it.
		for i := 1; i < len(ws); i++ {
			if ws[i].user == ws[i-1].user {
				continue
			}
			moved = true
			apart := ws[i].at.Sub(ws[i-1].at)
			if st.Closest == 0 || apart < st.Closest {
				st.Closest = max(apart, time.Nanosecond)
			}
			if apart < window && (closest == nil || apart < closest.Apart) {
				closest = &Double{Object: k, First: ws[i-1].user, Second: ws[i].user, At: ws[i].at, Apart: apart}
			}
		}
		if moved {
			st.Moved++
		}
		if closest != nil {
			doubles = append(doubles, *closest)
		}
	}
	return doubles, st
}
