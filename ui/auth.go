package ui

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sessionCookie holds a random session id; the token it stands for stays
// in the server's memory.
const sessionCookie = "manifestsync-session"

// identity is who a request acts as: the TokenReview's user in
// ModeCluster, the kubeconfig's user in ModeLocal.
type identity struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
	// key identifies the identity in the caches (a digest of all of it).
	key string
}

func newIdentity(name, uid string, groups []string, extra map[string][]string) *identity {
	id := &identity{Name: name, UID: uid, Groups: slices.Clone(groups), Extra: extra}
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q", name, uid, groups)
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, " %q=%q", k, extra[k])
	}
	id.key = hex.EncodeToString(h.Sum(nil))
	return id
}

// caller is an authenticated request's user and the client that acts as
// them.
type caller struct {
	id     *identity
	client client.Client
}

// errUnauthenticated: no token, or one the API server did not accept.
var errUnauthenticated = errors.New("not logged in")

// authenticate finds who makes r: in ModeLocal the kubeconfig's user; in
// ModeCluster the user of the bearer token of the Authorization header or
// of the session cookie, checked by TokenReview.
func (s *Server) authenticate(r *http.Request) (*caller, error) {
	if s.opts.Mode == ModeLocal {
		return &caller{id: &identity{Name: s.localUserName(), key: "local"}, client: s.base}, nil
	}
	token, session := "", ""
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, t, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(t) == "" {
			return nil, errUnauthenticated
		}
		token = strings.TrimSpace(t)
	} else if c, err := r.Cookie(sessionCookie); err == nil {
		token = s.sessions.token(c.Value)
		session = c.Value
	}
	if token == "" {
		return nil, errUnauthenticated
	}
	id, err := s.reviewToken(r.Context(), token)
	if err != nil {
		if session != "" && errors.Is(err, errUnauthenticated) {
			// Its token expired or was revoked: the session is over.
			s.sessions.remove(session)
		}
		return nil, err
	}
	c, err := s.clientFor(id)
	if err != nil {
		return nil, err
	}
	return &caller{id: id, client: c}, nil
}

// reviewToken asks the API server who token is, remembering the answer
// for a minute by the token's digest (never the token itself).
func (s *Server) reviewToken(ctx context.Context, token string) (*identity, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if id, ok := s.reviews.get(key); ok {
		if id == nil {
			return nil, errUnauthenticated
		}
		return id, nil
	}
	// Tokens not seen before cost a request to the API server each: a
	// flood of made-up ones waits here rather than flooding it.
	if err := s.reviewLimit.Wait(ctx); err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	tr, err := s.clientset.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		// The error of a TokenReview names no token; it is not cached, so
		// that a passing failure is not remembered.
		return nil, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		s.reviews.put(key, nil, tokenReviewTTL)
		return nil, errUnauthenticated
	}
	u := tr.Status.User
	extra := map[string][]string{}
	for k, v := range u.Extra {
		extra[k] = []string(v)
	}
	id := newIdentity(u.Username, u.UID, u.Groups, extra)
	s.reviews.put(key, id, tokenReviewTTL)
	return id, nil
}

// clientFor is the client that acts as id through impersonation on top of
// the operator's config, one per identity, the last used kept.
func (s *Server) clientFor(id *identity) (client.Client, error) {
	if c, ok := s.clients.get(id.key); ok {
		return c, nil
	}
	cfg := rest.CopyConfig(s.opts.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.Name, UID: id.UID, Groups: id.Groups, Extra: id.Extra}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", id.Name, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s.scheme, Mapper: s.mapper, HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", id.Name, err)
	}
	s.clients.put(id.key, c)
	return c, nil
}

// localUserName is the kubeconfig's user as the API server knows it (a
// SelfSubjectReview), for the events of actions; "" when it cannot say.
func (s *Server) localUserName() string {
	s.localUserOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := s.clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			s.log.V(1).Info("cannot tell the kubeconfig's user", "error", err.Error())
			s.localUser = "kubeconfig user"
			return
		}
		s.localUser = r.Status.UserInfo.Username
	})
	return s.localUser
}

// allowed reports whether id may verb ManifestSyncs in namespace ns ("":
// in every namespace), by a SubjectAccessReview the operator makes,
// remembered for 10 s. In ModeLocal everything the shared watch sees was
// listed with the user's own rights, so it is allowed.
func (s *Server) allowed(ctx context.Context, id *identity, verb, ns string) bool {
	if s.opts.Mode == ModeLocal {
		return true
	}
	key := id.key + "\x00" + verb + "\x00" + ns
	if ok, found := s.access.get(key); found {
		return ok
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range id.Extra {
		extra[k] = v
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.Name, UID: id.UID, Groups: id.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: "manifestsync.dev", Resource: "manifestsyncs",
		},
	}}
	res, err := s.clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		s.log.Error(err, "access review failed", "user", id.Name, "verb", verb, "namespace", ns)
		return false
	}
	s.access.put(key, res.Status.Allowed, accessReviewTTL)
	return res.Status.Allowed
}

// sessions maps random session ids to the tokens they stand for, bounded
// in count and age.
type sessions struct {
	mu sync.Mutex
	m  map[string]sessionEntry
}

type sessionEntry struct {
	token   string
	expires time.Time
}

func newSessions() *sessions { return &sessions{m: map[string]sessionEntry{}} }

// create stores token under a new random id.
func (s *sessions) create(token string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	id := hex.EncodeToString(b)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		for k, e := range s.m {
			if now.After(e.expires) {
				delete(s.m, k)
			}
		}
		// Still full: the oldest goes.
		for len(s.m) >= maxSessions {
			oldest, at := "", time.Time{}
			for k, e := range s.m {
				if oldest == "" || e.expires.Before(at) {
					oldest, at = k, e.expires
				}
			}
			delete(s.m, oldest)
		}
	}
	s.m[id] = sessionEntry{token: token, expires: now.Add(sessionTTL)}
	return id, nil
}

// token is the token of session id; "" for none or an expired one.
func (s *sessions) token(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok {
		return ""
	}
	if time.Now().After(e.expires) {
		delete(s.m, id)
		return ""
	}
	return e.token
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// ttlCache remembers values for a while, at most max of them.
type ttlCache[V any] struct {
	mu  sync.Mutex
	max int
	m   map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[V any](max int) *ttlCache[V] {
	return &ttlCache[V]{max: max, m: map[string]ttlEntry[V]{}}
}

func (c *ttlCache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Now().After(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(k string, v V, ttl time.Duration) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if now.After(e.expires) {
				delete(c.m, k)
			}
		}
		// Still full: any entry goes (they all expire soon anyway).
		for k := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[k] = ttlEntry[V]{v: v, expires: now.Add(ttl)}
}

// lru keeps the max values used last.
type lru[V any] struct {
	mu  sync.Mutex
	max int
	l   *list.List
	m   map[string]*list.Element
}

type lruEntry[V any] struct {
	k string
	v V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, l: list.New(), m: map[string]*list.Element{}}
}

func (c *lru[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.l.MoveToFront(e)
		return e.Value.(lruEntry[V]).v, true
	}
	var zero V
	return zero, false
}

func (c *lru[V]) put(k string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.Value = lruEntry[V]{k, v}
		c.l.MoveToFront(e)
		return
	}
	c.m[k] = c.l.PushFront(lruEntry[V]{k, v})
	for c.l.Len() > c.max {
		last := c.l.Back()
		c.l.Remove(last)
		delete(c.m, last.Value.(lruEntry[V]).k)
	}
}
