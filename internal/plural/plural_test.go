package plural

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "target", "0 targets"},
		{1, "target", "1 target"},
		{2, "target", "2 targets"},
		{1, "ManifestSync", "1 ManifestSync"},
		{3, "ManifestSync", "3 ManifestSyncs"},
		{2, "policy", "2 policies"},
		{1, "policy", "1 policy"},
		{2, "copy", "2 copies"},
		{2, "key", "2 keys"},
		{2, "match", "2 matches"},
		{2, "class", "2 classes"},
		{2, "more finding", "2 more findings"},
		{1, "conflict", "1 conflict"},
		{-1, "object", "-1 objects"},
	} {
		if got := Count(tc.n, tc.noun); got != tc.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
