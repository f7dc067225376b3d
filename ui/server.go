package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// routes is the UI's handler: security headers, the Host check of
// ModeLocal, cross-origin protection of POSTs, bounded bodies, then the
// routes.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("GET /{$}", s.authed(s.overview))
	mux.HandleFunc("GET /ms/{ns}/{name}", s.authed(s.msPage("tree")))
	mux.HandleFunc("GET /ms/{ns}/{name}/diff", s.authed(s.msPage("diff")))
	mux.HandleFunc("GET /ms/{ns}/{name}/history", s.authed(s.msPage("history")))
	mux.HandleFunc("GET /ms/{ns}/{name}/events", s.authed(s.msPage("events")))
	mux.HandleFunc("POST /ms/{ns}/{name}/actions/{action}", s.authed(s.action))
	mux.HandleFunc("GET /stream", s.authed(s.stream))

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	h := cop.Handler(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		if s.opts.Mode == ModeLocal && !loopbackHost(r.Host) {
			// A name other than an address or localhost may be an
			// attacker's domain resolving to 127.0.0.1 (DNS rebinding).
			http.Error(w, "this UI answers only to localhost or an IP address", http.StatusMisdirectedRequest)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		r = r.WithContext(context.WithValue(r.Context(), startKey{}, time.Now()))
		if r.URL.Path != "/stream" {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// authed runs h for an authenticated request. Without one a page
// redirects to the login page; the stream and POSTs answer 401.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, *caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.authenticate(r)
		if err != nil {
			if !errors.Is(err, errUnauthenticated) {
				s.log.Error(err, "authenticating a request", "path", r.URL.Path)
			}
			if r.Method == http.MethodGet && r.URL.Path != "/stream" {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="manifestsync"`)
			http.Error(w, "not logged in", http.StatusUnauthorized)
			return
		}
		h(w, r, c)
	}
}

// loginPage asks for a token (ModeCluster); in ModeLocal there is no
// login.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Mode == ModeLocal {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", &page{Title: "Log in", Data: loginData{}})
}

type loginData struct {
	Error string
}

// login checks the posted token with a TokenReview and, when the API
// server accepts it, starts a session. The token is never logged nor
// echoed back.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Mode == ModeLocal {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if err := r.ParseForm(); err != nil {
		s.render(w, r, http.StatusBadRequest, "login", &page{Title: "Log in", Data: loginData{Error: "The form could not be read."}})
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		s.render(w, r, http.StatusUnauthorized, "login", &page{Title: "Log in", Data: loginData{Error: "Enter a token."}})
		return
	}
	if _, err := s.reviewToken(r.Context(), token); err != nil {
		if !errors.Is(err, errUnauthenticated) {
			s.log.Error(err, "checking a login")
		}
		s.render(w, r, http.StatusUnauthorized, "login", &page{Title: "Log in", Data: loginData{Error: "The API server did not accept this token."}})
		return
	}
	id, err := s.sessions.create(token)
	if err != nil {
		s.log.Error(err, "starting a session")
		http.Error(w, "cannot start a session", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the session.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	to := "/login"
	if s.opts.Mode == ModeLocal {
		to = "/"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// msURL is the path of a ManifestSync's page.
func msURL(ns, name string) string {
	return "/ms/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}

// startKey holds the time a request arrived, in its context, for the
// Server-Timing header of pages.
type startKey struct{}

// serverTiming is the Server-Timing header of a response to r: the time
// the server took so far ("app;dur=MS").
func serverTiming(r *http.Request) string {
	start, ok := r.Context().Value(startKey{}).(time.Time)
	if !ok {
		return ""
	}
	return fmt.Sprintf("app;dur=%.2f", float64(time.Since(start).Microseconds())/1000)
}

// secure reports whether the browser reached the UI over https (directly,
// or through a proxy that says so), so that the cookie is sent only so.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
