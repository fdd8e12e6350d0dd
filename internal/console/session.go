package console

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/fencegate/fencegate/auth"
)

// Session bounds. A session is a random id the browser holds in a cookie;
// the principal it stands for stays on the server.
const (
	cookieName     = "fencegate_console"
	sessionTTL     = 12 * time.Hour
	maxSessions    = 1024
	sessionIDBytes = 32
)

type session struct {
	p       *auth.Principal
	expires time.Time
}

// sessions is the in-memory session table of one gateway process.
type sessions struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[string]session{}}
}

// create stores a session for p and returns its id. When the table is full
// the session closest to expiry goes first.
func (s *sessions) create(p *auth.Principal) (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSessions {
		var oldest string
		var at time.Time
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		delete(s.m, oldest)
	}
	s.m[id] = session{p: p, expires: now.Add(sessionTTL)}
	return id, nil
}

// get returns the principal of a live session.
func (s *sessions) get(id string) (*auth.Principal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok {
		return nil, false
	}
	if !s.now().Before(v.expires) {
		delete(s.m, id)
		return nil, false
	}
	return v.p, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// sessionCookie is the cookie that carries a session id: unreadable to
// scripts, never sent on cross-site requests, only to the console's paths,
// Secure when the listener speaks TLS.
func sessionCookie(r *http.Request, id string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: cookieName, Value: id, Path: Path,
		MaxAge: maxAge, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}
