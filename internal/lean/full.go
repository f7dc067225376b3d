//go:build !leanoperator

package lean

// Operator reports whether this is the lean operator binary.
const Operator = false
