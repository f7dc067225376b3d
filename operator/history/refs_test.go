package history

import (
	"testing"

	"github.com/manifestsync/manifestsync/engine/source"
)

// A source with substituteFrom has a revision that starts with the digest
// of its refs (source.RefsPrefix); its commit still ends it, so a history
// entry of it can be pinned.
func TestCommitOfRevisionWithRefs(t *testing.T) {
	for _, rev := range []string{
		source.RefsPrefix + "sha256:ab12@main@sha1:0123456789abcdef",
		source.RefsPrefix + "sha256:ab12@sha1:0123456789abcdef",
	} {
		if c, ok := CommitOf(rev); !ok || c != "0123456789abcdef" {
			t.Errorf("CommitOf(%q) = %q, %v", rev, c, ok)
		}
	}
}
