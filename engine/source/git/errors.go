package git

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Reasons a fetch fails; test for them with errors.Is.
var (
	ErrAuth         = errors.New("authentication failed")
	ErrHostKey      = errors.New("host key verification failed")
	ErrUnreachable  = errors.New("host unreachable")
	ErrRepoNotFound = errors.New("repository not found")
	ErrRefNotFound  = errors.New("ref not found")
	ErrPathNotFound = errors.New("path not found")
	ErrLimit        = errors.New("limit exceeded")
)

// classify prefixes a transport error with the reason it stands for.
func classify(err error) error {
	var hk *hostKeyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &hk):
		return fmt.Errorf("%w: %w", ErrHostKey, err)
	case errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(err.Error(), "ssh: unable to authenticate"):
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%w: %w", ErrRepoNotFound, err)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%w: the repository is empty", ErrRefNotFound)
	case isTimeout(err):
		return &timeoutError{err}
	case isNetError(err):
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

// isTimeout reports whether err is a deadline of a network step (a dial,
// a TLS handshake, response headers, an ssh connection's deadline).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// timeoutError is a network step's deadline: it is context.DeadlineExceeded
// too, as the fetch's own deadline is, so that both are told apart from
// other failures alike.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string   { return "timed out: " + e.err.Error() }
func (e *timeoutError) Unwrap() []error { return []error{context.DeadlineExceeded, e.err} }

func isNetError(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// redactedError is an error whose message had secrets masked.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact masks every secret in err's message. Credentials never reach the
// messages by design (they are taken out of URLs before go-git sees them);
// this is the second line of defence. Secrets shorter than four bytes are
// not masked, as masking them would garble the message.
func redact(err error, secrets []string) error {
	msg := err.Error()
	for _, s := range secrets {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}
