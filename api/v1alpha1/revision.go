package v1alpha1

// ShortRevision is a revision for people, as status.shortRevision holds
// it: "sha256:" and 12 hex digits.
func ShortRevision(rev string) string {
	const n = len("sha256:") + 12
	if len(rev) > n {
		return rev[:n]
	}
	return rev
}
