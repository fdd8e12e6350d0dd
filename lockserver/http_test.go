package lockserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockserver"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

var (
	lockIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)
	fenceRe  = regexp.MustCompile(`^[0-9]{15}$`)
	hashRe   = regexp.MustCompile(`^[0-9a-f]{24}$`)
)

const jsonCT = "application/json"

// js builds a JSON body from a map (keys in the order json.Marshal gives).
func js(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type httpCase struct {
	name   string
	method string // default POST
	path   string
	token  string // default adminToken; "-" sends none
	ctype  string // default application/json; "-" sends none
	body   string
	// bodyFn builds the body when the case needs fresh state (a new lock).
	bodyFn func(t *testing.T, e *env) string
	status int
	code   string // the error body's code; "" means the reply must not be an error
	check  func(t *testing.T, r reply)
}

// TestHTTPTable covers every row of docs/api.md's HTTP table and every error
// status the handlers produce, against a real bolt store.
func TestHTTPTable(t *testing.T) {
	e := newEnv(t, locktest.OpenBolt(t), nil)
	heldID, heldFence := e.acquire(t, "orders/held", 60_000)
	goneID, _ := e.acquire(t, "orders/gone", 60_000)
	if r := e.post(t, "/v1/locks/release", adminToken, map[string]any{"lockId": goneID}); r.status != 200 {
		t.Fatalf("setup release: %d %s", r.status, r.raw)
	}
	// fresh takes a new lock on key and returns a body naming it (plus
	// extra fields).
	fresh := func(key string, extra map[string]any) func(t *testing.T, e *env) string {
		return func(t *testing.T, e *env) string {
			id, _ := e.acquire(t, key, 60_000)
			body := map[string]any{"lockId": id}
			for k, v := range extra {
				body[k] = v
			}
			return js(t, body)
		}
	}
	now := time.Now().UnixMilli()

	cases := []httpCase{
		// acquire
		{name: "acquire ok", path: "/v1/locks/acquire", body: `{"key":"orders/1"}`, status: 200,
			check: func(t *testing.T, r reply) {
				if r.body["ok"] != true || !lockIDRe.MatchString(r.str("lockId")) || !fenceRe.MatchString(r.str("fence")) {
					t.Errorf("body %s", r.raw)
				}
				// Default TTL 30 s.
				if exp := r.num("expiresAtMs"); exp < now+25_000 || exp > now+40_000 {
					t.Errorf("expiresAtMs %d not about now+30s (%d)", exp, now+30_000)
				}
				if r.header.Get("Cache-Control") != "no-store" {
					t.Errorf("Cache-Control %q", r.header.Get("Cache-Control"))
				}
			}},
		{name: "acquire with ttl and charset", path: "/v1/locks/acquire", ctype: "application/json; charset=utf-8",
			body: `{"key":"orders/2","ttlMs":120000,"waitMs":0}`, status: 200,
			check: func(t *testing.T, r reply) {
				if exp := r.num("expiresAtMs"); exp < now+115_000 {
					t.Errorf("expiresAtMs %d, want about now+120s", exp)
				}
			}},
		{name: "acquire held is 409 locked", path: "/v1/locks/acquire", body: `{"key":"orders/held"}`, status: 409,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"ok":false,"reason":"locked"}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "acquire malformed JSON", path: "/v1/locks/acquire", body: `{"key":`, status: 400, code: "InvalidArgument"},
		{name: "acquire syntax error", path: "/v1/locks/acquire", body: `{"key" "x"}`, status: 400, code: "InvalidArgument"},
		{name: "acquire empty body", path: "/v1/locks/acquire", body: ``, status: 400, code: "InvalidArgument"},
		{name: "acquire body not an object", path: "/v1/locks/acquire", body: `["orders/1"]`, status: 400, code: "InvalidArgument"},
		{name: "acquire over 64 KiB", path: "/v1/locks/acquire",
			body: `{"key":"orders/big","pad":"` + strings.Repeat("x", 64<<10) + `"}`, status: 400, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if !strings.Contains(r.raw, "exceeds") {
					t.Errorf("message should say the body is too large: %s", r.raw)
				}
			}},
		{name: "acquire whitespace past 64 KiB", path: "/v1/locks/acquire",
			body: `{"key":"orders/big2"}` + strings.Repeat(" ", 64<<10), status: 400, code: "InvalidArgument"},
		{name: "acquire unknown field", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttl":5}`, status: 400, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if !strings.Contains(r.raw, `unknown field`) {
					t.Errorf("message %s", r.raw)
				}
			}},
		{name: "acquire ttlMs as string", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttlMs":"5000"}`, status: 400, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if !strings.Contains(r.raw, "ttlMs") {
					t.Errorf("message should name the field: %s", r.raw)
				}
			}},
		{name: "acquire ttlMs fractional", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttlMs":1.5}`, status: 400, code: "InvalidArgument"},
		{name: "acquire ttlMs zero", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttlMs":0}`, status: 400, code: "InvalidArgument"},
		{name: "acquire ttlMs negative", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttlMs":-1}`, status: 400, code: "InvalidArgument"},
		{name: "acquire ttlMs overflows a duration", path: "/v1/locks/acquire", body: `{"key":"orders/3","ttlMs":9223372036854775}`, status: 400, code: "InvalidArgument"},
		{name: "acquire key as number", path: "/v1/locks/acquire", body: `{"key":42}`, status: 400, code: "InvalidArgument"},
		{name: "acquire waitMs negative", path: "/v1/locks/acquire", body: `{"key":"orders/3","waitMs":-5}`, status: 400, code: "InvalidArgument"},
		{name: "acquire waitMs over the cap", path: "/v1/locks/acquire", body: `{"key":"orders/3","waitMs":5001}`, status: 400, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if !strings.Contains(r.raw, "5000") {
					t.Errorf("message should name the cap: %s", r.raw)
				}
			}},
		{name: "acquire trailing garbage", path: "/v1/locks/acquire", body: `{"key":"orders/3"} x`, status: 400, code: "InvalidArgument"},
		{name: "acquire two objects", path: "/v1/locks/acquire", body: `{"key":"orders/3"}{"key":"orders/4"}`, status: 400, code: "InvalidArgument"},
		{name: "acquire empty key", path: "/v1/locks/acquire", body: `{"key":""}`, status: 400, code: "InvalidArgument"},
		{name: "acquire missing key", path: "/v1/locks/acquire", body: `{}`, status: 400, code: "InvalidArgument"},
		{name: "acquire key over 512 bytes", path: "/v1/locks/acquire", body: js(t, map[string]any{"key": strings.Repeat("k", 513)}), status: 400, code: "InvalidArgument"},
		{name: "acquire text/plain", path: "/v1/locks/acquire", ctype: "text/plain", body: `{"key":"orders/3"}`, status: 400, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if !strings.Contains(r.raw, "Content-Type") {
					t.Errorf("message %s", r.raw)
				}
			}},
		{name: "acquire form content type", path: "/v1/locks/acquire", ctype: "application/x-www-form-urlencoded", body: `{"key":"orders/3"}`, status: 400, code: "InvalidArgument"},
		{name: "acquire no content type", path: "/v1/locks/acquire", ctype: "-", body: `{"key":"orders/3"}`, status: 400, code: "InvalidArgument"},
		{name: "acquire latin1 charset", path: "/v1/locks/acquire", ctype: "application/json; charset=latin1", body: `{"key":"orders/3"}`, status: 400, code: "InvalidArgument"},
		{name: "acquire GET is 405", method: http.MethodGet, path: "/v1/locks/acquire", status: 405, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if r.header.Get("Allow") != http.MethodPost {
					t.Errorf("Allow %q", r.header.Get("Allow"))
				}
			}},
		{name: "acquire PUT is 405", method: http.MethodPut, path: "/v1/locks/acquire", body: `{"key":"orders/3"}`, status: 405, code: "InvalidArgument"},

		// auth
		{name: "no token is 401", path: "/v1/locks/acquire", token: "-", body: `{"key":"orders/5"}`, status: 401, code: "AuthFailed",
			check: func(t *testing.T, r reply) {
				if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") || strings.Contains(got, "error=") {
					t.Errorf("WWW-Authenticate %q", got)
				}
			}},
		{name: "unknown token is 401", path: "/v1/locks/acquire", token: unknownTok, body: `{"key":"orders/5"}`, status: 401, code: "AuthFailed",
			check: func(t *testing.T, r reply) {
				if got := r.header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
					t.Errorf("WWW-Authenticate %q", got)
				}
			}},
		{name: "401 comes before body validation", path: "/v1/locks/acquire", token: "-", body: `garbage`, status: 401, code: "AuthFailed"},
		{name: "token outside its prefix is 403", path: "/v1/locks/acquire", token: ordersToken, body: `{"key":"billing/1"}`, status: 403, code: "AuthFailed",
			check: func(t *testing.T, r reply) {
				if got := r.header.Get("WWW-Authenticate"); !strings.Contains(got, "insufficient_scope") {
					t.Errorf("WWW-Authenticate %q", got)
				}
			}},
		{name: "token inside its prefix", path: "/v1/locks/acquire", token: ordersToken, body: `{"key":"orders/6"}`, status: 200},
		{name: "token without the operation is 403", path: "/v1/locks/acquire", token: readerToken, body: `{"key":"orders/7"}`, status: 403, code: "AuthFailed"},
		{name: "reader may check status", method: http.MethodGet, path: "/v1/locks/status?key=orders/held", token: readerToken, status: 200},
		{name: "default operations exclude audit", method: http.MethodGet, path: "/v1/audit?key=orders/held", token: ordersToken, status: 403, code: "AuthFailed"},
		{name: "prefix token status on a foreign key is 403", method: http.MethodGet, path: "/v1/locks/status?key=billing/1", token: ordersToken, status: 403, code: "AuthFailed"},
		{name: "release by lockId needs no key scope", path: "/v1/locks/release", token: ordersToken,
			bodyFn: func(t *testing.T, e *env) string {
				id, _ := e.acquire(t, "billing/9", 60_000)
				return js(t, map[string]any{"lockId": id})
			}, status: 200},

		// release
		{name: "release ok", path: "/v1/locks/release", bodyFn: fresh("orders/r1", nil), status: 200,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"ok":true}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "release gone is 404 ok=false", path: "/v1/locks/release", body: js(t, map[string]any{"lockId": goneID}), status: 404,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"ok":false}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "release bad lockId", path: "/v1/locks/release", body: `{"lockId":"not-a-lock-id"}`, status: 400, code: "InvalidArgument"},
		{name: "release lockId with bad characters", path: "/v1/locks/release", body: `{"lockId":"AAAAAAAAAAAAAAAAAAAAA+"}`, status: 400, code: "InvalidArgument"},
		{name: "release missing lockId", path: "/v1/locks/release", body: `{}`, status: 400, code: "InvalidArgument"},
		{name: "release key instead of lockId", path: "/v1/locks/release", body: `{"key":"orders/held"}`, status: 400, code: "InvalidArgument"},

		// extend
		{name: "extend ok", path: "/v1/locks/extend", bodyFn: fresh("orders/x1", map[string]any{"ttlMs": 90_000}), status: 200,
			check: func(t *testing.T, r reply) {
				if r.body["ok"] != true || r.num("expiresAtMs") < now+85_000 {
					t.Errorf("body %s, want expiry about now+90s", r.raw)
				}
			}},
		{name: "extend gone is 404 ok=false", path: "/v1/locks/extend", body: js(t, map[string]any{"lockId": goneID, "ttlMs": 1000}), status: 404,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"ok":false}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "extend without ttlMs", path: "/v1/locks/extend", body: js(t, map[string]any{"lockId": heldID}), status: 400, code: "InvalidArgument"},
		{name: "extend ttlMs zero", path: "/v1/locks/extend", body: js(t, map[string]any{"lockId": heldID, "ttlMs": 0}), status: 400, code: "InvalidArgument"},
		{name: "extend bad lockId", path: "/v1/locks/extend", body: `{"lockId":"short","ttlMs":1000}`, status: 400, code: "InvalidArgument"},

		// lookup
		{name: "lookup by key", path: "/v1/locks/lookup", body: `{"key":"orders/held"}`, status: 200,
			check: func(t *testing.T, r reply) {
				if r.str("keyHash") != lockstore.HashKey("orders/held") || r.str("lockIdHash") != lockstore.HashKey(heldID) ||
					r.str("fence") != heldFence || r.num("expiresAtMs") <= now || r.num("acquiredAtMs") < now-5000 {
					t.Errorf("body %s", r.raw)
				}
				if strings.Contains(r.raw, heldID) || strings.Contains(r.raw, "orders/held") {
					t.Errorf("lookup leaked the raw key or lockId: %s", r.raw)
				}
			}},
		{name: "lookup by lockId", path: "/v1/locks/lookup", body: js(t, map[string]any{"lockId": heldID}), status: 200,
			check: func(t *testing.T, r reply) {
				if !hashRe.MatchString(r.str("keyHash")) || r.str("fence") != heldFence {
					t.Errorf("body %s", r.raw)
				}
			}},
		{name: "lookup absent key is 404 {}", path: "/v1/locks/lookup", body: `{"key":"orders/none"}`, status: 404,
			check: func(t *testing.T, r reply) {
				if r.raw != "{}\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "lookup released lockId is 404 {}", path: "/v1/locks/lookup", body: js(t, map[string]any{"lockId": goneID}), status: 404},
		{name: "lookup both key and lockId", path: "/v1/locks/lookup", body: js(t, map[string]any{"key": "orders/held", "lockId": heldID}), status: 400, code: "InvalidArgument"},
		{name: "lookup neither", path: "/v1/locks/lookup", body: `{}`, status: 400, code: "InvalidArgument"},
		{name: "lookup bad lockId", path: "/v1/locks/lookup", body: `{"lockId":"!!"}`, status: 400, code: "InvalidArgument"},
		{name: "lookup GET is 405", method: http.MethodGet, path: "/v1/locks/lookup", status: 405, code: "InvalidArgument"},

		// status
		{name: "status locked", method: http.MethodGet, path: "/v1/locks/status?key=orders/held", status: 200,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"locked":true}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "status free", method: http.MethodGet, path: "/v1/locks/status?key=orders%2Fnone", status: 200,
			check: func(t *testing.T, r reply) {
				if r.raw != `{"locked":false}`+"\n" {
					t.Errorf("body %q", r.raw)
				}
			}},
		{name: "status without key", method: http.MethodGet, path: "/v1/locks/status", status: 400, code: "InvalidArgument"},
		{name: "status empty key", method: http.MethodGet, path: "/v1/locks/status?key=", status: 400, code: "InvalidArgument"},
		{name: "status key twice", method: http.MethodGet, path: "/v1/locks/status?key=a&key=b", status: 400, code: "InvalidArgument"},
		{name: "status bad escape", method: http.MethodGet, path: "/v1/locks/status?key=%zz", status: 400, code: "InvalidArgument"},
		{name: "status POST is 405", path: "/v1/locks/status?key=orders/held", body: `{}`, status: 405, code: "InvalidArgument",
			check: func(t *testing.T, r reply) {
				if r.header.Get("Allow") != http.MethodGet {
					t.Errorf("Allow %q", r.header.Get("Allow"))
				}
			}},

		// routing
		{name: "unknown lock path is 404", path: "/v1/locks/steal", body: `{}`, status: 404, code: "InvalidArgument"},
		{name: "unknown path is 404", method: http.MethodGet, path: "/nope", status: 404, code: "InvalidArgument"},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = http.MethodPost
			}
			token := c.token
			switch token {
			case "":
				token = adminToken
			case "-":
				token = ""
			}
			ctype := c.ctype
			switch ctype {
			case "":
				ctype = jsonCT
			case "-":
				ctype = ""
			}
			body := c.body
			if c.bodyFn != nil {
				body = c.bodyFn(t, e)
			}
			r := e.do(t, context.Background(), method, c.path, token, ctype, body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d; body %s", r.status, c.status, r.raw)
			}
			if !strings.HasPrefix(r.header.Get("Content-Type"), jsonCT) {
				t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
			}
			if got := r.errCode(); got != c.code {
				t.Errorf("error code %q, want %q; body %s", got, c.code, r.raw)
			}
			if c.code != "" {
				if msg, _ := r.body["error"].(map[string]any)["message"].(string); msg == "" {
					t.Errorf("error without a message: %s", r.raw)
				}
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}

	t.Run("logs carry no secrets", func(t *testing.T) {
		logs := e.logs.String()
		if !strings.Contains(logs, `"token":"admin"`) {
			t.Errorf("access logs should name the token; got:\n%s", logs)
		}
		assertNoSecrets(t, logs, adminToken, ordersToken, readerToken, unknownTok, heldID, goneID,
			"orders/held", "orders/1", "billing/1")
	})

	t.Run("metrics", func(t *testing.T) {
		for _, c := range []struct {
			op, result string
			min        float64
		}{
			{"acquire", "ok", 3}, {"acquire", "fail", 1}, {"acquire", "InvalidArgument", 10},
			{"acquire", "AuthFailed", 4}, {"release", "ok", 2}, {"release", "fail", 1},
			{"extend", "fail", 1}, {"lookup", "ok", 2}, {"lookup", "fail", 2}, {"status", "ok", 3},
		} {
			if got := e.counter(t, c.op, c.result); got < c.min {
				t.Errorf("fencegate_lock_ops_total{op=%q,result=%q} = %v, want >= %v", c.op, c.result, got, c.min)
			}
		}
		r := e.do(t, context.Background(), http.MethodGet, "/metrics", "", "", "")
		for _, want := range []string{"fencegate_lock_op_duration_seconds_bucket{op=\"acquire\",le=\"0.0001\"}", "fencegate_locks_held "} {
			if !strings.Contains(r.raw, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// TestHTTPWait covers waitMs: success when the holder releases, 409 when
// the time runs out, and the wait ending when the client goes away.
func TestHTTPWait(t *testing.T) {
	e := newEnv(t, locktest.OpenBolt(t), nil)

	t.Run("holder releases during the wait", func(t *testing.T) {
		id, fence := e.acquire(t, "jobs/a", 60_000)
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(300 * time.Millisecond)
			e.post(t, "/v1/locks/release", adminToken, map[string]any{"lockId": id})
		}()
		start := time.Now()
		r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "jobs/a", "waitMs": 4000})
		<-released
		if r.status != 200 || r.body["ok"] != true {
			t.Fatalf("status %d %s", r.status, r.raw)
		}
		if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
			t.Errorf("acquired after %v; want after the 300ms release and well before the 4s wait", el)
		}
		if r.str("fence") <= fence {
			t.Errorf("fence %s not above the previous %s", r.str("fence"), fence)
		}
	})

	t.Run("wait runs out is 409 locked", func(t *testing.T) {
		e.acquire(t, "jobs/b", 60_000)
		start := time.Now()
		r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "jobs/b", "waitMs": 600})
		el := time.Since(start)
		if r.status != 409 || r.raw != `{"ok":false,"reason":"locked"}`+"\n" {
			t.Fatalf("status %d %s", r.status, r.raw)
		}
		if el < 550*time.Millisecond || el > 3*time.Second {
			t.Errorf("answered after %v, want about 600ms", el)
		}
	})

	t.Run("client going away stops the wait", func(t *testing.T) {
		e.acquire(t, "jobs/c", 60_000)
		before := e.counter(t, "acquire", "Aborted")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/v1/locks/acquire",
			strings.NewReader(`{"key":"jobs/c","waitMs":5000}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", jsonCT)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		start := time.Now()
		if _, err := e.http.Client().Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("client error %v, want its deadline", err)
		}
		// The server notices the disconnect and ends the wait as Aborted
		// long before the 5 s waitMs.
		for e.counter(t, "acquire", "Aborted") == before {
			if time.Since(start) > 3*time.Second {
				t.Fatal("the server kept waiting after the client went away")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestHTTPAudit covers GET /v1/audit over the bolt store's audit log.
func TestHTTPAudit(t *testing.T) {
	store := locktest.OpenBolt(t)
	e := newEnv(t, store, nil)
	base := time.Now().UnixMilli() - 10_000
	var events []lockstore.AuditEvent
	for i := range 5 {
		key := "orders/a"
		if i%2 == 1 {
			key = "orders/b"
		}
		events = append(events, lockstore.AuditEvent{
			TimeMs: base + int64(i)*1000, DecisionID: fmt.Sprintf("d%d", i), Source: "authz-http",
			KeyHash: lockstore.HashKey(key), KeyDigest: lockstore.DigestKey(key).String(), Reason: "stale", Policy: "holder", Mode: "enforce",
		})
	}
	if err := store.AppendAudit(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	ids := func(r reply) string {
		var out []string
		evs, _ := r.body["events"].([]any)
		for _, ev := range evs {
			out = append(out, ev.(map[string]any)["decisionId"].(string))
		}
		return strings.Join(out, ",")
	}
	cases := []struct {
		name   string
		query  string
		token  string
		status int
		ids    string
	}{
		{"all newest first", "", adminToken, 200, "d4,d3,d2,d1,d0"},
		{"by key", "?key=orders/a", adminToken, 200, "d4,d2,d0"},
		{"since", fmt.Sprintf("?since=%d", base+2500), adminToken, 200, "d4,d3"},
		{"limit", "?limit=2", adminToken, 200, "d4,d3"},
		{"key since limit", fmt.Sprintf("?key=orders/b&since=%d&limit=1", base), adminToken, 200, "d3"},
		{"no match is an empty list", "?key=orders/zzz", adminToken, 200, ""},
		{"limit zero", "?limit=0", adminToken, 400, ""},
		{"limit over 1000", "?limit=1001", adminToken, 400, ""},
		{"since not a number", "?since=yesterday", adminToken, 400, ""},
		{"since negative", "?since=-1", adminToken, 400, ""},
		{"no token", "", "", 401, ""},
		{"default scope lacks audit", "?key=orders/a", ordersToken, 403, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, context.Background(), http.MethodGet, "/v1/audit"+c.query, c.token, "", "")
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.raw)
			}
			if c.status == 200 {
				if _, ok := r.body["events"].([]any); !ok {
					t.Fatalf("events is not a list: %s", r.raw)
				}
				if got := ids(r); got != c.ids {
					t.Errorf("events %q, want %q", got, c.ids)
				}
			}
		})
	}

	t.Run("prefix token needs a key", func(t *testing.T) {
		a, err := auth.NewAuthenticator([]auth.Token{
			{Name: "auditor", SHA256: auth.HashToken("aud-secret"), Prefixes: []string{"orders/"}, Operations: []string{"audit"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		e2 := newEnv(t, store, func(o *lockserver.Options) { o.Auth = a; o.Registerer = nil; o.Gatherer = nil })
		if r := e2.do(t, context.Background(), http.MethodGet, "/v1/audit", "aud-secret", "", ""); r.status != 403 {
			t.Errorf("without key: status %d, want 403: %s", r.status, r.raw)
		}
		if r := e2.do(t, context.Background(), http.MethodGet, "/v1/audit?key=orders/a", "aud-secret", "", ""); r.status != 200 || ids(r) != "d4,d2,d0" {
			t.Errorf("with key: status %d %s", r.status, r.raw)
		}
		if r := e2.do(t, context.Background(), http.MethodGet, "/v1/audit?key=billing/a", "aud-secret", "", ""); r.status != 403 {
			t.Errorf("foreign key: status %d, want 403", r.status)
		}
	})

	t.Run("no audit log is 501", func(t *testing.T) {
		e3 := newEnv(t, store, func(o *lockserver.Options) { o.Audit = nil; o.Registerer = nil; o.Gatherer = nil })
		r := e3.do(t, context.Background(), http.MethodGet, "/v1/audit", adminToken, "", "")
		if r.status != http.StatusNotImplemented || r.errCode() != "ServiceUnavailable" {
			t.Errorf("status %d %s", r.status, r.raw)
		}
	})
}

// TestHTTPAuditHashCollision: a token scoped to "a/" asks for the audit
// events of a key it crafted under "a/" with the same hashKey as
// "b/victim2-…" (a real collision). It must get its own key's events only,
// never the victim's: the filter is the key's SHA-256 digest, not hashKey.
func TestHTTPAuditHashCollision(t *testing.T) {
	crafted, victim := storetest.HashKeyCollision[0], storetest.HashKeyCollision[1]
	if lockstore.HashKey(crafted) != lockstore.HashKey(victim) || !strings.HasPrefix(crafted, "a/") || !strings.HasPrefix(victim, "b/") {
		t.Fatalf("not a collision across a/ and b/: %q %q", crafted, victim)
	}
	store := locktest.OpenBolt(t)
	// The victim's denial is recorded the way the edge records it: a real
	// check through the auditor into the store.
	aud := fencecheck.NewAuditor(store, fencecheck.AuditorOptions{})
	chk := fencecheck.New(store, fencecheck.Options{Audit: aud})
	if d, _ := chk.Check(context.Background(), fencecheck.Request{Key: victim, Write: true,
		Fence: "000000000000009", Source: "authz-http"}); d.Allowed || d.Reason != fencecheck.ReasonUnknown {
		t.Fatalf("victim check = %+v, want denied unknown", d)
	}
	if err := aud.Close(); err != nil {
		t.Fatal(err)
	}

	a, err := auth.NewAuthenticator([]auth.Token{
		{Name: "a-auditor", SHA256: auth.HashToken("a-secret"), Prefixes: []string{"a/"}, Operations: []string{"audit"}},
		{Name: "admin", SHA256: auth.HashToken(adminToken), Prefixes: []string{"*"}, Operations: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, store, func(o *lockserver.Options) { o.Auth = a })
	get := func(token, key string) reply {
		return e.do(t, context.Background(), http.MethodGet, "/v1/audit?key="+url.QueryEscape(key), token, "", "")
	}
	r := get("a-secret", crafted)
	if r.status != 200 {
		t.Fatalf("scoped query of its own key: status %d %s", r.status, r.raw)
	}
	if evs, _ := r.body["events"].([]any); len(evs) != 0 {
		t.Fatalf("an a/-scoped token read another key's events through a hashKey collision: %s", r.raw)
	}
	if r := get("a-secret", victim); r.status != 403 {
		t.Fatalf("scoped query of the victim's key: status %d, want 403", r.status)
	}
	r = get(adminToken, victim)
	if evs, _ := r.body["events"].([]any); r.status != 200 || len(evs) != 1 {
		t.Fatalf("admin query of the victim's key: status %d %s; want its one event", r.status, r.raw)
	}
}

func TestHTTPOperations(t *testing.T) {
	t.Run("closed store is 503 everywhere", func(t *testing.T) {
		store := locktest.OpenBolt(t)
		e := newEnv(t, store, nil)
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		r := e.post(t, "/v1/locks/acquire", adminToken, map[string]any{"key": "orders/1"})
		if r.status != 503 || r.errCode() != "ServiceUnavailable" {
			t.Errorf("acquire: %d %s", r.status, r.raw)
		}
		if r := e.do(t, context.Background(), http.MethodGet, "/v1/locks/status?key=a", adminToken, "", ""); r.status != 503 {
			t.Errorf("status: %d %s", r.status, r.raw)
		}
	})

	t.Run("auth off", func(t *testing.T) {
		e := newEnv(t, locktest.OpenBolt(t), func(o *lockserver.Options) { o.Auth = nil })
		if r := e.post(t, "/v1/locks/acquire", "", map[string]any{"key": "any/key"}); r.status != 200 {
			t.Errorf("status %d %s", r.status, r.raw)
		}
		if !strings.Contains(e.logs.String(), "authentication is off") {
			t.Error("New did not warn that auth is off")
		}
	})

	t.Run("New validates options", func(t *testing.T) {
		if _, err := lockserver.New(lockserver.Options{}); err == nil {
			t.Error("New without a store succeeded")
		}
		if _, err := lockserver.New(lockserver.Options{Store: locktest.OpenBolt(t), MaxWait: -time.Second}); err == nil {
			t.Error("New with a negative MaxWait succeeded")
		}
	})
}

// TestStatusMapping pins docs/api.md's code tables for every LockError code.
func TestStatusMapping(t *testing.T) {
	want := map[lockstore.Code][2]string{
		lockstore.InvalidArgument:    {"400", "InvalidArgument"},
		lockstore.AuthFailed:         {"401", "Unauthenticated"},
		lockstore.RateLimited:        {"429", "ResourceExhausted"},
		lockstore.AcquisitionTimeout: {"408", "DeadlineExceeded"},
		lockstore.Aborted:            {"499", "Canceled"},
		lockstore.ServiceUnavailable: {"503", "Unavailable"},
		lockstore.NetworkTimeout:     {"504", "DeadlineExceeded"},
		lockstore.Internal:           {"500", "Internal"},
	}
	for _, c := range lockstore.Codes {
		w, ok := want[c]
		if !ok {
			t.Errorf("code %s has no expectation", c)
			continue
		}
		if got := fmt.Sprint(lockserver.HTTPStatus(c)); got != w[0] {
			t.Errorf("HTTPStatus(%s) = %s, want %s", c, got, w[0])
		}
		if got := lockserver.GRPCCode(c).String(); got != w[1] {
			t.Errorf("GRPCCode(%s) = %s, want %s", c, got, w[1])
		}
	}
}
