package starlark

import (
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{{
		name: "layout",
		in:   "def f(a,b=1):\n  return {'k':a,\n  'v':b}\n",
		want: "def f(a, b = 1):\n    return {\n        \"k\": a,\n        \"v\": b,\n    }\n",
	}, {
		name: "while loop",
		in:   "def f():\n  n=0\n  while n<5:\n      n+=1\n  return n\n",
		want: "def f():\n    n = 0\n    while n < 5:\n        n += 1\n    return n\n",
	}, {
		name: "bytes literals",
		in:   "x = [b'abc',  rb\"\\d\", b\"\"\"x\ny\"\"\" ]\ny = f(  b\"z\")\n",
		want: "x = [b\"abc\", rb\"\\d\", b\"\"\"x\ny\"\"\"]\ny = f(b\"z\")\n",
	}, {
		name: "while loop and bytes literal",
		in:   "def f():\n  while n:\n      n-=1\n  return b\"x\"\n",
		want: "def f():\n    while n:\n        n -= 1\n    return b\"x\"\n",
	}, {
		name: "loads and comments",
		in:   "load('b.star','y')\nload('a.star','x')\n# about z\nz=x+y # sum\n",
		want: "load(\"a.star\", \"x\")\nload(\"b.star\", \"y\")\n\n# about z\nz = x + y  # sum\n",
	}, {
		name: "operators and comprehensions stay",
		in:   ops,
		want: ops,
	}, {
		name: "docstrings re-indented",
		in:   "def g():\n        \"\"\"Doc\n        more\n        \"\"\"\n        pass\n",
		want: "def g():\n    \"\"\"Doc\n    more\n    \"\"\"\n    pass\n",
	}, {
		name: "no BUILD rewrites: call arguments keep their order",
		in:   "cc_library(srcs=['b','a'], name='x')\n",
		want: "cc_library(srcs = [\"b\", \"a\"], name = \"x\")\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Format("t.star", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tc.want)
			}
			again, err := Format("t.star", got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("not idempotent: %v\n%s", err, again)
			}
		})
	}
}

// ops is formatted already: the formatter keeps every operator and form.
const ops = `a = 1 & 2 | 3 ^ 4
b = ~a << 2 >> 1
c = 7 // 2
c //= 2
d = {k: v for k, v in [(1, 2)] if k}
e = [x for x in range(3) for y in range(2)]
f = lambda x, *args, **kw: x
g = "%s" % a
h = -1 if a else +2
i = a[1:2:3]
j = not a in [1] and a not in [2]
k, (l, m) = 1, (2, 3)
s = set([1])
`

func TestFormatErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"def f(:\n", "t.star:1:8: "},
		{"x = 1\ny = (\n", "t.star:3:1: "},
		{"__engine_fmt_bytes = 1\n", "reserved"},
	} {
		_, err := Format("t.star", []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Format(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// TestFormatSameProgram: the check that the output parses to the program
// it was given catches a formatter that changes it.
func TestFormatSameProgram(t *testing.T) {
	parse := func(src string) string {
		f, err := fileOptions.Parse("t.star", []byte(src), 0)
		if err != nil {
			t.Fatal(err)
		}
		return dump(f)
	}
	same := [][2]string{
		{"f(a, b = 1, *c)", "f(\n    a,\n    b = 1,\n    *c\n)\n"},
		{"f(*c, b = 1)", "f(b = 1, *c)"},
		{"load('b', 'y')\nload('a', 'x')\n", "load('a', 'x')\nload('b', 'y')\n"},
		{"x = 'a' # c\n", "x = \"a\"\n"},
		{"def f():\n  '''Doc\n    more'''\n", "def f():\n  '''Doc\n  more'''\n"},
	}
	for _, p := range same {
		if a, b := parse(p[0]), parse(p[1]); a != b {
			t.Errorf("%q and %q dump differently:\n%s\n%s", p[0], p[1], a, b)
		}
	}
	differ := [][2]string{
		{"f(a, b)", "f(b, a)"},
		{"x = 1 + 2", "x = 1 - 2"},
		{"x = 'a'", "x = 'b'"},
		{"x = b'a'", "x = 'a'"},
		{"f(a = 1, b = 2)", "f(b = 2, a = 1)"},
		{"while x:\n  pass\n", "if x:\n  pass\n"},
		{"x = '''a\n  b'''\n", "x = '''a\nb'''\n"},
	}
	for _, p := range differ {
		if parse(p[0]) == parse(p[1]) {
			t.Errorf("%q and %q dump alike", p[0], p[1])
		}
	}
}
