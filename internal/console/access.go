package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lockstore"
)

// viewer is who is looking: a token's principal, or nil with auth off.
type viewer struct {
	p         *auth.Principal
	sessionID string // set when the principal came from a session cookie
}

func (v viewer) canLocks() bool   { return v.p == nil || v.p.CanDo(auth.OpLookup) }
func (v viewer) canDenials() bool { return v.p == nil || v.p.CanDo(auth.OpAudit) }
func (v viewer) allKeys() bool    { return v.p == nil || v.p.CanUseAllKeys() }

// name is the viewer's token name ("" with auth off), for per-principal
// bounds.
func (v viewer) name() string {
	if v.p == nil {
		return ""
	}
	return v.p.Name
}

// seesKey reports whether the viewer's prefixes cover a raw key.
func (v viewer) seesKey(raw string) bool {
	if v.p == nil || v.p.CanUseAllKeys() {
		return true
	}
	nk, err := lockstore.NormalizeKey(raw)
	return err == nil && v.p.CanUseKey(nk)
}

// seesDenial: a prefix-scoped viewer needs the event's raw key to check
// its scope; without it the event is not shown (except on the timeline of
// a key the viewer named and was authorised for).
func (v viewer) seesDenial(ev lockstore.AuditEvent) bool {
	if v.allKeys() {
		return true
	}
	return ev.Key != "" && v.seesKey(ev.Key)
}

var (
	errNoCredentials = errors.New("log in with a token that has the ui operation")
	errNotUI         = errors.New("this token may not open the console (it lacks the ui operation)")
)

// resolve finds the viewer of a request: nobody needed with auth off; else
// an Authorization: Bearer header or the session cookie. A token without
// the ui operation is refused even if it is otherwise valid.
func (c *Console) resolve(r *http.Request) (viewer, int, error) {
	if c.auth == nil {
		return viewer{}, 0, nil
	}
	var v viewer
	if h := r.Header.Get("Authorization"); h != "" {
		p, err := c.auth.Authenticate(h)
		if err != nil {
			return v, http.StatusUnauthorized, err
		}
		v.p = p
	} else if ck, err := r.Cookie(cookieName); err == nil {
		p, ok := c.sessions.get(ck.Value)
		if !ok {
			return v, http.StatusUnauthorized, errors.New("the session ended; log in again")
		}
		v.p, v.sessionID = p, ck.Value
	} else {
		return v, http.StatusUnauthorized, errNoCredentials
	}
	if !v.p.CanDo(auth.OpUI) {
		return v, http.StatusForbidden, errNotUI
	}
	return v, 0, nil
}

// sameOrigin refuses a state-changing request sent from another origin
// (the session cookie is SameSite=Strict already; this covers the login
// form, which has no cookie yet).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// login takes a token from the form, checks it, and starts a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.auth == nil {
		http.Redirect(w, r, Path, http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-origin login refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		c.renderLogin(w, http.StatusBadRequest, "the form did not parse")
		return
	}
	p, err := c.auth.Authenticate("Bearer " + r.PostForm.Get("token"))
	if err != nil {
		c.renderLogin(w, http.StatusUnauthorized, "that token is not valid")
		return
	}
	if !p.CanDo(auth.OpUI) {
		c.renderLogin(w, http.StatusForbidden, errNotUI.Error())
		return
	}
	id, err := c.sessions.create(p)
	if err != nil {
		c.log.Error("console: creating a session", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, sessionCookie(r, id, int(sessionTTL.Seconds())))
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// logout ends the session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-origin logout refused", http.StatusForbidden)
		return
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.drop(ck.Value)
	}
	http.SetCookie(w, sessionCookie(r, "", -1))
	http.Redirect(w, r, Path, http.StatusSeeOther)
}
