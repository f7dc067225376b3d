package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/manifestsync/manifestsync/engine/source"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// The commands read only regular files and directories of the user's
// (source.ReadRegularFile, and source.Dir and the local copies beside a
// sync file, which refuse a FIFO, a socket or a device, naming it), and
// they read under --timeout: the reading of a sync file and of its
// sources, each policy directory, each file vet reads, a --namespaces
// file or stdin. A read that still blocks (a git server that never
// answers, stdin that never ends, a hung network file system) does not
// hold the command: it returns at the deadline with an error naming what
// it waited on.

// readDeadline is the deadline of one reading of input, --timeout from
// now (the Starlark limits' default when timeout is 0), and how to end
// it.
func readDeadline(ctx context.Context, timeout time.Duration) (context.Context, time.Duration, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if timeout <= 0 {
		timeout = lstar.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, timeout, cancel
}

// readWithin runs read, which reads what is named what, until ctx's
// deadline, timeout after the reading began (see readDeadline). A read
// that is not done by then is left to end by itself (the command exits)
// and the error, of exit status 2, names what and the limit.
func readWithin[T any](ctx context.Context, timeout time.Duration, what string, read func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := read(ctx)
		done <- result{v, err}
	}()
	var r result
	select {
	case r = <-done:
		if r.err == nil || ctx.Err() == nil {
			return r.v, r.err
		}
	case <-ctx.Done():
	}
	var zero T
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return zero, ctx.Err() // interrupted
	}
	return zero, &exitError{code: exitUsage, err: fmt.Errorf("%s: still reading after %v (--timeout)", what, timeout)}
}

// readUserFile reads name, a file the user gave, within --timeout: a
// regular file only (source.ReadRegularFile).
func readUserFile(ctx context.Context, timeout time.Duration, name string) ([]byte, error) {
	return readWithin(ctx, timeout, name, func(context.Context) ([]byte, error) {
		return source.ReadRegularFile(name)
	})
}

// kubeconfigRules are client-go's rules for finding the kubeconfig
// (explicit, else $KUBECONFIG, else ~/.kube/config), with every file they
// name that exists checked to be a regular file first: client-go reads
// them whole, and would block on a FIFO.
func kubeconfigRules(cmd, explicit string) (*clientcmd.ClientConfigLoadingRules, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicit
	for _, p := range append([]string{explicit}, rules.Precedence...) {
		if p == "" {
			continue
		}
		if info, err := os.Stat(p); err == nil && !info.Mode().IsRegular() {
			return nil, usageErr("%s: kubeconfig: %w", cmd, &source.NotRegularError{Path: p, Mode: info.Mode()})
		}
	}
	return rules, nil
}
