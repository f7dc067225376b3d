// Command engine is ManifestSync's one binary: offline evaluation (eval),
// CI checks (vet, test), the controller manager (operator) and its
// evaluation workers (eval-worker), what the operator would change (diff),
// status, history and rollback, the web UI (ui), OCI artifacts (push,
// pull), module documentation (doc) and the version.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	exitOK      = 0
	exitFailed  = 1 // evaluation failed, or findings
	exitUsage   = 2 // bad flags, unreadable or malformed input
	programName = "engine"
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
	// tree holds the files the error may name: their lines are shown
	// under it.
	tree *tree
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func failed(err error) error { return &exitError{code: exitFailed, err: err} }

// note writes an informational line to w (stderr): "note: " and the
// message. Errors start "engine: "; a line that only informs must not look
// like one (kubectl and git start theirs "Warning:", "hint:").
func note(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "note: "+format+"\n", args...)
}

// warning writes a line about something that is likely a mistake but not
// an error (the command goes on) to w (stderr): "warning: " and the
// message.
func warning(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "warning: "+format+"\n", args...)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			writeError(stderr, programName+": ", ee.err, ee.tree, colorOn(stderr))
		}
		return ee.code
	}
	// Errors cobra makes itself are about flags and arguments.
	fmt.Fprintf(stderr, "%s: %v\n", programName, err)
	return exitUsage
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           programName,
		Short:         "ManifestSync: evaluate, check and sync Kubernetes manifests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newEvalCmd(), newVetCmd(), newTestCmd(), newDiffCmd(), newDocCmd(), newFmtCmd(), newSchemaCmd(), newInitCmd(), newVersionCmd(), newOperatorCmd(), newStatusCmd(), newHistoryCmd(), newRollbackCmd(), newImportCmd(), newUICmd(), newPushCmd(), newPullCmd(), newEvalWorkerCmd())
	return root
}
