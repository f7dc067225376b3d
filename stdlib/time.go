package stdlib

import (
	"time"
	_ "time/tzdata" // time zones must not depend on the machine's tzdata

	startime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// Time is the Starlark module time, go.starlark.net/lib/time with its
// built-ins named "time.NAME" in errors.
//
//	time.now() -> time.time                # the revision's commit time, or a fixed time
//	time.time(*, year=, month=, day=, hour=, minute=, second=, nanosecond=, location="UTC") -> time.time
//	time.parse_time(x, format=RFC3339, location="UTC") -> time.time
//	time.from_timestamp(sec, nsec=0) -> time.time
//	time.parse_duration(d) -> time.duration
//	time.is_valid_timezone(loc) -> bool
//	time.nanosecond ... time.hour          # durations
//
// now never reads the wall clock: the interpreter sets every thread's clock
// (lib/time.SetNow) to the commit time of the revision being evaluated, or to
// a fixed value, so evaluations are reproducible. For the same reason
// from_timestamp returns UTC times (upstream uses the machine's zone), and the
// time zone database is compiled in.
var Time = deterministicTime(qualify(startime.Module))

// deterministicTime replaces the upstream from_timestamp, whose result is in
// the machine's local zone, by one that returns UTC, and makes now reject the
// arguments it would otherwise ignore.
func deterministicTime(m *starlarkstruct.Module) *starlarkstruct.Module {
	now := m.Members["now"].(*starlark.Builtin)
	m.Members["now"] = newBuiltin(now.Name(),
		func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 0); err != nil {
				return nil, err
			}
			return now.CallInternal(thread, args, kwargs)
		})
	upstream := m.Members["from_timestamp"].(*starlark.Builtin)
	m.Members["from_timestamp"] = newBuiltin(upstream.Name(),
		func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			v, err := upstream.CallInternal(thread, args, kwargs)
			if err != nil {
				return nil, err
			}
			if t, ok := v.(startime.Time); ok {
				v = startime.Time(time.Time(t).UTC())
			}
			return v, nil
		})
	return m
}

var timeModule = Module{
	Name:  "time",
	Doc:   "Times and durations (go.starlark.net/lib/time). time.now() is deterministic: it returns the commit time of the revision being evaluated, or a fixed time when there is none. Times have attributes year, month, day, hour, minute, second, nanosecond, unix and unix_nano, and methods format(layout) and in_location(loc); durations have hours, minutes, seconds and so on and support arithmetic.",
	Value: Time,
	Funcs: []Func{
		{"now", "time.now() -> time.time", "Returns the evaluation's fixed clock: the commit time of the revision being evaluated, or a fixed time when there is none. It never reads the wall clock."},
		{"time", `time.time(*, year=0, month=0, day=0, hour=0, minute=0, second=0, nanosecond=0, location="UTC") -> time.time`, "Returns the time with the given fields in location. Every argument is a keyword and should be given: out-of-range values, including the default zero month and day, are normalised as Go's time.Date does."},
		{"parse_time", `time.parse_time(x, format="2006-01-02T15:04:05Z07:00", location="UTC") -> time.time`, "Parses the string x with a Go time layout (RFC 3339 by default) in location."},
		{"from_timestamp", "time.from_timestamp(sec, nsec=0) -> time.time", "Returns the UTC time sec seconds and nsec nanoseconds after the Unix epoch."},
		{"parse_duration", "time.parse_duration(d) -> time.duration", `Parses a Go duration string such as "1h30m" or "250ms".`},
		{"is_valid_timezone", "time.is_valid_timezone(loc) -> bool", `Reports whether loc is a time zone name the evaluator knows, such as "UTC" or "Europe/Paris".`},
		{"nanosecond", "time.nanosecond", "A duration of one nanosecond."},
		{"microsecond", "time.microsecond", "A duration of one microsecond."},
		{"millisecond", "time.millisecond", "A duration of one millisecond."},
		{"second", "time.second", "A duration of one second."},
		{"minute", "time.minute", "A duration of one minute."},
		{"hour", "time.hour", "A duration of one hour."},
	},
}
