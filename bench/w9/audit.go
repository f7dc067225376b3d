package w9

import (
	"cmp"
	"slices"
	"time"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// Double is a ConfigMap written by two replicas within the window: the
// closest such pair of its writes.
type Double struct {
	Run           string // the run of replicas, as replica named it
	Object        string // namespace/name
	First, Second string // the users, in order
	At            time.Time
	Apart         time.Duration
}

// WriteStats are what DoubleWrites counted.
type WriteStats struct {
	// Writes are the successful writes of ConfigMaps by the replicas;
	// Objects the ConfigMaps they wrote, each once per run.
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
// pair. replica names the run each replica's user belongs to: the writes
// of one run are compared, a ConfigMap deleted after one run and written
// again in the next being another object. A write is a create, update,
// patch or delete the API server accepted (a 2xx answer); an apply that
// changed nothing counts too, as the request was sent. Two writes by one
// user never count: one owner writing an object twice is a sync, not two
// owners.
func DoubleWrites(events []testenv.AuditEvent, replica func(user string) (run string, ok bool), window time.Duration) ([]Double, WriteStats) {
	type write struct {
		user string
		at   time.Time
	}
	type object struct{ run, name string }
	writes := map[object][]write{}
	users := map[string]bool{}
	var st WriteStats
	for _, ev := range events {
		run, ok := replica(ev.User.Username)
		if ev.ObjectRef.Resource != "configmaps" || ev.ObjectRef.Subresource != "" || ev.ObjectRef.Name == "" ||
			ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code >= 300 || !ok {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete":
		default:
			continue
		}
		k := object{run, ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name}
		writes[k] = append(writes[k], write{ev.User.Username, ev.RequestReceivedTimestamp})
		users[ev.User.Username] = true
		st.Writes++
	}
	st.Objects, st.Users = len(writes), len(users)
	var doubles []Double
	keys := make([]object, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b object) int { return cmp.Or(cmp.Compare(a.run, b.run), cmp.Compare(a.name, b.name)) })
	for _, k := range keys {
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
				closest = &Double{Run: k.run, Object: k.name, First: ws[i-1].user, Second: ws[i].user, At: ws[i].at, Apart: apart}
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
