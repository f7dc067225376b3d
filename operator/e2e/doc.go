// Package e2e holds end-to-end tests of the operator that need more than
// the controller package's shared operator: operators with real git
// sources on a git daemon, the webhook receiver, rollbacks, and several
// operator instances on one API server. It has no code besides its tests,
// and nothing may import it.
package e2e
