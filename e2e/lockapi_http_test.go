package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// fenceRE is the wire form of a fence (docs/design.md, "Fences": 15 digits).
var fenceRE = regexp.MustCompile(`^[0-9]{15}$`)

// rawKeyRE matches the keys the lock tests use.
var rawKeyRE = regexp.MustCompile(`(orders|fences|errors|wait|audit)/[0-9a-f]{12}`)

// TestLockAPIHTTP walks every row of docs/api.md's lock table over HTTP, on
// every store kind, against one gateway per store.
func TestLockAPIHTTP(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			g := StartGateway(t, s.URL)
			waitReady(t, g.URL())
			base := g.URL()

			t.Run("lifecycle", func(t *testing.T) {
				id := testHTTPLifecycle(t, base)
				if id != "" && strings.Contains(g.Logs(), id) {
					t.Errorf("gateway log contains a lockId")
				}
			})
			t.Run("fences increase", func(t *testing.T) { testHTTPFencesIncrease(t, base) })
			t.Run("errors", func(t *testing.T) { testHTTPErrors(t, base) })
			t.Run("wait succeeds", func(t *testing.T) { testHTTPWaitSucceeds(t, base) })
			t.Run("wait times out", func(t *testing.T) { testHTTPWaitTimesOut(t, base) })
			t.Run("audit", func(t *testing.T) { testHTTPAudit(t, base) })
			t.Run("refused keys", func(t *testing.T) { testHTTPRefusedKeys(t, base, s.Name, g.Logs) })

			// The gateway logs at debug level here, access logs included:
			// still no raw key (every test key is <word>/<12 hex digits>).
			if m := rawKeyRE.FindString(g.Logs()); m != "" {
				t.Errorf("gateway log contains the raw key %q", m)
			}
		})
	}
}

// testHTTPLifecycle returns the lockId it used, for the log check.
func testHTTPLifecycle(t *testing.T, base string) string {
	key := "orders/" + randHex(6)
	start := time.Now().UnixMilli()
	a := acquireHTTP(t, base, key, 10000)
	// Firestore's time authority is the client (here the gateway, same
	// host); the others use the server's clock: all within seconds.
	if a.ExpiresAtMs < start+10000-5000 || a.ExpiresAtMs > time.Now().UnixMilli()+10000+5000 {
		t.Errorf("expiresAtMs %d is not about now+10s (now %d)", a.ExpiresAtMs, start)
	}

	r := post(t, base, "/v1/locks/acquire", `{"key":%q}`, key)
	wantExact(t, "second acquire", r, 409, `{"ok":false,"reason":"locked"}`)

	wantLocked(t, base, key, true)

	// Lookup by key and by lockId: the sanitised view, never the secrets.
	for _, body := range []string{
		fmt.Sprintf(`{"key":%q}`, key),
		fmt.Sprintf(`{"lockId":%q}`, a.LockID),
	} {
		r := post(t, base, "/v1/locks/lookup", "%s", body)
		if r.Status != 200 {
			t.Fatalf("lookup %s = %d %s", body, r.Status, r.Body)
		}
		wantFields(t, "lookup", r, "keyHash", "lockIdHash", "fence", "expiresAtMs", "acquiredAtMs")
		if got, want := r.JSON["keyHash"], lockstore.HashKey(key); got != want {
			t.Errorf("lookup keyHash = %v, want %v", got, want)
		}
		if got, want := r.JSON["lockIdHash"], lockstore.HashKey(a.LockID); got != want {
			t.Errorf("lookup lockIdHash = %v, want %v", got, want)
		}
		if r.JSON["fence"] != a.Fence {
			t.Errorf("lookup fence = %v, want %s", r.JSON["fence"], a.Fence)
		}
		if int64(num(r.JSON["expiresAtMs"])) != a.ExpiresAtMs {
			t.Errorf("lookup expiresAtMs = %v, want %d", r.JSON["expiresAtMs"], a.ExpiresAtMs)
		}
		if acq := int64(num(r.JSON["acquiredAtMs"])); acq <= 0 || acq > a.ExpiresAtMs {
			t.Errorf("lookup acquiredAtMs = %d, want in (0, %d]", acq, a.ExpiresAtMs)
		}
		noSecrets(t, "lookup", r.Body, key, a.LockID)
	}

	r = post(t, base, "/v1/locks/extend", `{"lockId":%q,"ttlMs":20000}`, a.LockID)
	if r.Status != 200 || r.JSON["ok"] != true {
		t.Fatalf("extend = %d %s", r.Status, r.Body)
	}
	wantFields(t, "extend", r, "ok", "expiresAtMs")
	if exp := int64(num(r.JSON["expiresAtMs"])); exp <= a.ExpiresAtMs {
		t.Errorf("extend expiresAtMs %d is not past the first %d", exp, a.ExpiresAtMs)
	}

	wantExact(t, "release", post(t, base, "/v1/locks/release", `{"lockId":%q}`, a.LockID), 200, `{"ok":true}`)
	wantExact(t, "second release", post(t, base, "/v1/locks/release", `{"lockId":%q}`, a.LockID), 404, `{"ok":false}`)
	wantExact(t, "extend after release", post(t, base, "/v1/locks/extend", `{"lockId":%q,"ttlMs":1000}`, a.LockID), 404, `{"ok":false}`)
	wantLocked(t, base, key, false)
	wantExact(t, "lookup key after release", post(t, base, "/v1/locks/lookup", `{"key":%q}`, key), 404, `{}`)
	wantExact(t, "lookup lockId after release", post(t, base, "/v1/locks/lookup", `{"lockId":%q}`, a.LockID), 404, `{}`)
	wantExact(t, "lookup of a never-locked key", post(t, base, "/v1/locks/lookup", `{"key":%q}`, key+"/never"), 404, `{}`)
	wantLocked(t, base, key+"/never", false)
	return a.LockID
}

func testHTTPFencesIncrease(t *testing.T, base string) {
	key := "fences/" + randHex(6)
	prev := ""
	for i := range 4 {
		a := acquireHTTP(t, base, key, 10000)
		if a.Fence <= prev { // same width: string order is numeric order
			t.Fatalf("acquire %d: fence %s does not follow %s", i, a.Fence, prev)
		}
		prev = a.Fence
		wantExact(t, "release", post(t, base, "/v1/locks/release", `{"lockId":%q}`, a.LockID), 200, `{"ok":true}`)
	}
	// A different key has its own counter: its first fence is the store
	// clock's floor (docs/fences.md), whatever the first key's count.
	before := time.Now().UnixMilli()
	a := acquireHTTP(t, base, key+"/other", 10000)
	after := time.Now().UnixMilli()
	n, err := lockstore.ParseFence(a.Fence)
	if lo, hi := backend.FenceFloorAt(before-1000), backend.FenceFloorAt(after+1000); err != nil || n < lo || n > hi {
		t.Errorf("first fence on a new key = %s, want the clock floor, in [%d, %d]", a.Fence, lo, hi)
	}
}

func testHTTPErrors(t *testing.T, base string) {
	held := acquireHTTP(t, base, "errors/"+randHex(6), 10000)
	big := `{"key":"big"` + strings.Repeat(" ", 65<<10) + `}`
	cases := []struct {
		name        string
		call        Call
		status      int
		code        lockstore.Code
		allow       string
		contentType string
	}{
		{name: "malformed JSON", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":`}, status: 400},
		{name: "trailing data", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a"} {}`}, status: 400},
		{name: "unknown field", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","owner":"me"}`}, status: 400},
		{name: "wrong type ttlMs", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","ttlMs":"30s"}`}, status: 400},
		{name: "wrong type key", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":42}`}, status: 400},
		{name: "body over 64 KiB", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: big}, status: 400},
		{name: "empty key", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":""}`}, status: 400},
		{name: "ttlMs 0", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","ttlMs":0}`}, status: 400},
		{name: "ttlMs negative", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","ttlMs":-5}`}, status: 400},
		{name: "waitMs over the cap", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","waitMs":30001}`}, status: 400},
		{name: "waitMs negative", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","waitMs":-1}`}, status: 400},
		{name: "charset not UTF-8", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a"}`, ContentType: "application/json; charset=latin1"}, status: 400},
		{name: "form content type", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `key=a`, ContentType: "application/x-www-form-urlencoded"}, status: 400},
		{name: "body is an array", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `[]`}, status: 400},
		{name: "key over 512 bytes", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"` + strings.Repeat("k", 513) + `"}`}, status: 400},
		{name: "ttlMs not an integer", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a","ttlMs":1.5}`}, status: 400},
		{name: "content type text/plain", call: Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"a"}`, ContentType: "text/plain"}, status: 400},
		{name: "bad lockId on release", call: Call{Method: "POST", Path: "/v1/locks/release", Body: `{"lockId":"not-a-lock-id"}`}, status: 400},
		{name: "bad lockId on extend", call: Call{Method: "POST", Path: "/v1/locks/extend", Body: `{"lockId":"AAAA","ttlMs":1000}`}, status: 400},
		{name: "extend without ttlMs", call: Call{Method: "POST", Path: "/v1/locks/extend", Body: fmt.Sprintf(`{"lockId":%q}`, held.LockID)}, status: 400},
		{name: "extend ttlMs 0", call: Call{Method: "POST", Path: "/v1/locks/extend", Body: fmt.Sprintf(`{"lockId":%q,"ttlMs":0}`, held.LockID)}, status: 400},
		{name: "bad lockId on lookup", call: Call{Method: "POST", Path: "/v1/locks/lookup", Body: `{"lockId":"x"}`}, status: 400},
		{name: "lookup with key and lockId", call: Call{Method: "POST", Path: "/v1/locks/lookup", Body: fmt.Sprintf(`{"key":"a","lockId":%q}`, held.LockID)}, status: 400},
		{name: "lookup with neither", call: Call{Method: "POST", Path: "/v1/locks/lookup", Body: `{}`}, status: 400},
		{name: "status without key", call: Call{Method: "GET", Path: "/v1/locks/status"}, status: 400},
		{name: "audit limit 0", call: Call{Method: "GET", Path: "/v1/audit?limit=0"}, status: 400},
		{name: "audit limit not a number", call: Call{Method: "GET", Path: "/v1/audit?limit=ten"}, status: 400},
		{name: "GET acquire", call: Call{Method: "GET", Path: "/v1/locks/acquire"}, status: 405, allow: "POST"},
		{name: "PUT release", call: Call{Method: "PUT", Path: "/v1/locks/release", Body: `{}`}, status: 405, allow: "POST"},
		{name: "POST status", call: Call{Method: "POST", Path: "/v1/locks/status", Body: `{"key":"a"}`}, status: 405, allow: "GET"},
		{name: "DELETE audit", call: Call{Method: "DELETE", Path: "/v1/audit"}, status: 405, allow: "GET"},
		{name: "unknown lock path", call: Call{Method: "POST", Path: "/v1/locks/steal", Body: `{}`}, status: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Do(t, base, c.call)
			if r.Status != c.status {
				t.Fatalf("status = %d, want %d; body %s", r.Status, c.status, r.Body)
			}
			code := c.code
			if code == "" {
				code = lockstore.InvalidArgument
			}
			wantError(t, r, code)
			if c.allow != "" && r.Header.Get("Allow") != c.allow {
				t.Errorf("Allow = %q, want %q", r.Header.Get("Allow"), c.allow)
			}
		})
	}
	// None of the rejected calls touched the held lock.
	r := post(t, base, "/v1/locks/lookup", `{"lockId":%q}`, held.LockID)
	if r.Status != 200 || r.JSON["fence"] != held.Fence {
		t.Errorf("held lock after the error table: %d %s", r.Status, r.Body)
	}
}

func testHTTPWaitSucceeds(t *testing.T, base string) {
	key := "wait/" + randHex(6)
	first := acquireHTTP(t, base, key, 30000)
	type result struct {
		r   Reply
		err error
		dur time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		r, err := doE(base, Call{Method: "POST", Path: "/v1/locks/acquire", Body: fmt.Sprintf(`{"key":%q,"ttlMs":10000,"waitMs":5000}`, key)}, 30*time.Second)
		done <- result{r, err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case res := <-done:
		t.Fatalf("waiting acquire returned while the lock was held: %v %d %s", res.err, res.r.Status, res.r.Body)
	default:
	}
	wantExact(t, "release", post(t, base, "/v1/locks/release", `{"lockId":%q}`, first.LockID), 200, `{"ok":true}`)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.r.Status != 200 || res.r.JSON["ok"] != true {
		t.Fatalf("waiting acquire = %d %s", res.r.Status, res.r.Body)
	}
	if f, _ := res.r.JSON["fence"].(string); f <= first.Fence || !fenceRE.MatchString(f) {
		t.Errorf("waiting acquire fence %q is not after %s", f, first.Fence)
	}
	if res.dur > 4*time.Second {
		t.Errorf("waiting acquire took %v after a release at ~300ms", res.dur)
	}
}

func testHTTPWaitTimesOut(t *testing.T, base string) {
	key := "wait/" + randHex(6)
	acquireHTTP(t, base, key, 30000)
	start := time.Now()
	r := post(t, base, "/v1/locks/acquire", `{"key":%q,"waitMs":700}`, key)
	dur := time.Since(start)
	wantExact(t, "acquire waiting on a held key", r, 409, `{"ok":false,"reason":"locked"}`)
	if dur < 600*time.Millisecond || dur > 5*time.Second {
		t.Errorf("waitMs 700 answered after %v", dur)
	}
}

// testHTTPRefusedKeys: keys a backend refuses as input (Redis: "id:…",
// "fence:…", which land on SyncGuard's index and counter keys) are bad
// input at the edge and in the lock API, 400 malformed / InvalidArgument,
// with no WARN: never a 503 that any client could use to fake an outage.
// Elsewhere they are ordinary keys. The key "audit" is ordinary everywhere
// (the Redis audit stream lives under <prefix>.fencegate:).
func testHTTPRefusedKeys(t *testing.T, base, store string, logs func() string) {
	for _, key := range []string{"id:AAAAAAAAAAAAAAAAAAAAAA", "fence:" + randHex(4)} {
		h := http.Header{}
		h.Set("X-Forwarded-Method", "PUT")
		h.Set("X-Forwarded-Uri", "/x")
		h.Set("X-Fence-Key", key)
		h.Set("X-Fence-Token", "000000000000001")
		r := Do(t, base, Call{Method: "GET", Path: "/v1/authz/check", Header: h})
		a := post(t, base, "/v1/locks/acquire", `{"key":%q,"ttlMs":5000}`, key)
		if store == "redis" {
			if r.Status != 400 || r.Header.Get("X-Fence-Reason") != "malformed" {
				t.Errorf("check of reserved key %q = %d %v, want 400 malformed", key, r.Status, r.Header.Get("X-Fence-Reason"))
			}
			if a.Status != 400 || a.JSON["error"] == nil {
				t.Errorf("acquire of reserved key %q = %d %s, want 400", key, a.Status, a.Body)
			}
			continue
		}
		if r.Status != 409 || a.Status != 200 {
			t.Errorf("key %q on %s: check %d, acquire %d %s; want an ordinary key (409 unknown, 200)", key, store, r.Status, a.Status, a.Body)
		}
	}
	key := "audit"
	a := post(t, base, "/v1/locks/acquire", `{"key":%q,"ttlMs":5000}`, key)
	if a.Status != 200 {
		t.Fatalf("acquire of key audit = %d %s", a.Status, a.Body)
	}
	post(t, base, "/v1/locks/release", `{"lockId":%q}`, a.JSON["lockId"])
	if strings.Contains(logs(), "backend read failed") {
		t.Errorf("a refused key was logged as a backend failure:\n%s", logs())
	}
}

func testHTTPAudit(t *testing.T, base string) {
	key := "audit/" + randHex(6)
	a1 := acquireHTTP(t, base, key, 10000)
	post(t, base, "/v1/locks/release", `{"lockId":%q}`, a1.LockID)
	a2 := acquireHTTP(t, base, key, 10000)

	check := func(fence string) Reply {
		h := http.Header{}
		h.Set("X-Forwarded-Method", "PUT")
		h.Set("X-Forwarded-Uri", "/orders/1?secret=q")
		h.Set("X-Fence-Key", key)
		if fence != "" {
			h.Set("X-Fence-Token", fence)
		}
		return Do(t, base, Call{Method: "GET", Path: "/v1/authz/check", Header: h})
	}
	// An older denial first (no fence), then the stale one: newest first.
	if r := check(""); r.Status != 428 {
		t.Fatalf("check without a fence = %d %s", r.Status, r.Body)
	}
	time.Sleep(20 * time.Millisecond)
	r := check(a1.Fence)
	if r.Status != 409 || r.Header.Get("X-Fence-Reason") != "stale" {
		t.Fatalf("check with the stale fence = %d %v %s", r.Status, r.Header, r.Body)
	}
	if r.JSON["current"] != a2.Fence || r.JSON["presented"] != a1.Fence {
		t.Errorf("denial body = %s, want presented %s current %s", r.Body, a1.Fence, a2.Fence)
	}
	// The holder's fence passes.
	if r := check(a2.Fence); r.Status != 200 || r.Header.Get("X-Fence-Verified") != a2.Fence {
		t.Errorf("check with the current fence = %d %v", r.Status, r.Header)
	}

	// The auditor batches (flush every second): poll.
	var events []lockstore.AuditEvent
	var body []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := Do(t, base, Call{Method: "GET", Path: "/v1/audit?key=" + key})
		if r.Status != 200 {
			t.Fatalf("audit = %d %s", r.Status, r.Body)
		}
		wantFields(t, "audit", r, "events")
		var out struct{ Events []lockstore.AuditEvent }
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatalf("audit body %s: %v", r.Body, err)
		}
		events, body = out.Events, r.Body
		if len(events) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(events) != 2 {
		t.Fatalf("audit events for the key after 10s: %s", body)
	}
	stale, missing := events[0], events[1]
	if stale.Reason != "stale" || missing.Reason != "missing" {
		t.Fatalf("audit reasons (newest first) = %s, %s; want stale, missing", stale.Reason, missing.Reason)
	}
	if stale.TimeMs < missing.TimeMs {
		t.Errorf("audit not newest first: %d before %d", stale.TimeMs, missing.TimeMs)
	}
	if stale.KeyHash != lockstore.HashKey(key) || stale.Key != "" {
		t.Errorf("stale event keyHash %q key %q, want %q and no raw key", stale.KeyHash, stale.Key, lockstore.HashKey(key))
	}
	if stale.Presented != a1.Fence || stale.Current != a2.Fence || stale.Method != "PUT" || stale.Source != "authz-http" {
		t.Errorf("stale event = %+v", stale)
	}
	// The path can spell the key (template routes), so it is audited only
	// with check.auditRawKeys, which this gateway does not set.
	if stale.Path != "" {
		t.Errorf("stale event path %q, want none without raw-key auditing", stale.Path)
	}
	noSecrets(t, "audit", body, key, a1.LockID, a2.LockID, "secret=q")

	// Unfiltered: the same events (this store namespace is ours alone),
	// and limit is honoured.
	r = Do(t, base, Call{Method: "GET", Path: "/v1/audit?limit=1"})
	var one struct{ Events []lockstore.AuditEvent }
	if r.Status != 200 || json.Unmarshal(r.Body, &one) != nil || len(one.Events) != 1 || one.Events[0].DecisionID != stale.DecisionID {
		t.Errorf("audit?limit=1 = %d %s, want the stale event alone", r.Status, r.Body)
	}
	// since past the newest event: nothing.
	r = Do(t, base, Call{Method: "GET", Path: fmt.Sprintf("/v1/audit?key=%s&since=%d", key, stale.TimeMs+1)})
	if r.Status != 200 || !strings.Contains(string(r.Body), `"events":[]`) {
		t.Errorf("audit since the future = %d %s, want no events", r.Status, r.Body)
	}
}

// TestLockAPIStoreDown: a gateway whose store goes away answers the lock
// API promptly with 503 ServiceUnavailable (not after the client gives up),
// /readyz 503 and /healthz 200, and serves again when the store is back.
// Each case runs its own server, so killing it disturbs no other test.
func TestLockAPIStoreDown(t *testing.T) {
	cases := []struct {
		name  string
		start func(t *testing.T) outage
		// codes are the acceptable answers: a store that retries until a
		// deadline may say NetworkTimeout (504) rather than 503.
		codes map[int]lockstore.Code
		// serial: the case sets environment variables for its gateway
		// (t.Setenv), so it runs alone; the top-level test is not parallel
		// for the same reason.
		serial bool
	}{
		{"redis", startRedis, map[int]lockstore.Code{503: lockstore.ServiceUnavailable}, false},
		{"postgres", startPostgres, map[int]lockstore.Code{503: lockstore.ServiceUnavailable}, false},
		{"firestore", startFirestoreEmulator, map[int]lockstore.Code{503: lockstore.ServiceUnavailable, 504: lockstore.NetworkTimeout}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel()
			}
			o := tc.start(t)
			for k, v := range o.env {
				t.Setenv(k, v)
			}
			g := StartGateway(t, o.url, "--grpc-addr", "off", "--authz-addr", "off")
			base := g.URL()
			waitReady(t, base)
			a := acquireHTTP(t, base, "down/1", 30000)

			o.stop()

			for _, c := range []Call{
				{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"down/2"}`},
				{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"down/2","waitMs":3000}`},
				{Method: "POST", Path: "/v1/locks/release", Body: fmt.Sprintf(`{"lockId":%q}`, a.LockID)},
				{Method: "GET", Path: "/v1/locks/status?key=down/1"},
			} {
				what := c.Method + " " + c.Path + " " + c.Body
				start := time.Now()
				r, err := doE(base, c, 8*time.Second)
				dur := time.Since(start)
				if err != nil {
					// One hung call is enough to show it; don't wait for more.
					t.Errorf("%s with the store down: no answer after %v (%v)", what, dur.Round(time.Millisecond), err)
					break
				}
				code, ok := tc.codes[r.Status]
				if !ok {
					t.Errorf("%s with the store down = %d %s, want one of %v", what, r.Status, r.Body, tc.codes)
					continue
				}
				wantError(t, r, code)
				if dur > 5*time.Second {
					t.Errorf("%s took %v to fail", what, dur)
				}
				t.Logf("%s failed in %v: %d", what, dur.Round(time.Millisecond), r.Status)
			}
			if r, err := doE(base, Call{Method: "GET", Path: "/readyz"}, 10*time.Second); err != nil || r.Status != 503 {
				t.Errorf("/readyz with the store down = %d %s %v", r.Status, r.Body, err)
			}
			if r := Do(t, base, Call{Method: "GET", Path: "/healthz"}); r.Status != 200 {
				t.Errorf("/healthz with the store down = %d %s (the process is up)", r.Status, r.Body)
			}

			if o.restart != nil {
				o.restart()
				waitReady(t, base)
				if r := post(t, base, "/v1/locks/acquire", `{"key":"down/3"}`); r.Status != 200 {
					t.Errorf("acquire after the store came back = %d %s", r.Status, r.Body)
				}
			}
			for _, l := range strings.Split(g.Logs(), "\n") {
				if strings.Contains(l, "down/1") || strings.Contains(l, a.LockID) {
					t.Errorf("gateway log names a raw key or lockId: %s", l)
				}
			}
		})
	}
}

// --- helpers shared by this package's lock tests ---

// acquired is a successful acquire reply.
type acquired struct {
	LockID      string
	Fence       string
	ExpiresAtMs int64
}

// acquireHTTP takes key and checks the reply's shape.
func acquireHTTP(t testing.TB, base, key string, ttlMs int) acquired {
	t.Helper()
	r := post(t, base, "/v1/locks/acquire", `{"key":%q,"ttlMs":%d}`, key, ttlMs)
	if r.Status != 200 || r.JSON["ok"] != true {
		t.Fatalf("acquire %s = %d %s", key, r.Status, r.Body)
	}
	wantFields(t, "acquire", r, "ok", "lockId", "fence", "expiresAtMs")
	a := acquired{LockID: str(r.JSON["lockId"]), Fence: str(r.JSON["fence"]), ExpiresAtMs: int64(num(r.JSON["expiresAtMs"]))}
	if len(a.LockID) != 22 || lockstore.ValidateLockID(a.LockID) != nil {
		t.Fatalf("acquire lockId %q is not a 22-char lock id", a.LockID)
	}
	if !fenceRE.MatchString(a.Fence) {
		t.Fatalf("acquire fence %q is not 15 digits", a.Fence)
	}
	if a.ExpiresAtMs <= 0 {
		t.Fatalf("acquire expiresAtMs = %d", a.ExpiresAtMs)
	}
	return a
}

// post sends a JSON body built with fmt.Sprintf.
func post(t testing.TB, base, path, format string, args ...any) Reply {
	t.Helper()
	return Do(t, base, Call{Method: "POST", Path: path, Body: fmt.Sprintf(format, args...)})
}

// doE is Do without testing.TB, for goroutines (t.Fatal must not be called
// off the test goroutine) and for calls that may not be answered in time.
func doE(base string, c Call, timeout time.Duration) (Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, c.Method, base+c.Path, strings.NewReader(c.Body))
	if err != nil {
		return Reply{}, err
	}
	if c.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := Reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	_ = json.Unmarshal(raw, &r.JSON)
	return r, err
}

// wantExact checks the status and that the body is exactly want as JSON.
func wantExact(t testing.TB, what string, r Reply, status int, want string) {
	t.Helper()
	var got, exp any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", what, r.Body, err)
		return
	}
	_ = json.Unmarshal([]byte(want), &exp)
	if r.Status != status || fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Errorf("%s = %d %s, want %d %s", what, r.Status, strings.TrimSpace(string(r.Body)), status, want)
	}
}

// wantFields checks that the reply object has exactly these fields.
func wantFields(t testing.TB, what string, r Reply, fields ...string) {
	t.Helper()
	if len(r.JSON) != len(fields) {
		t.Errorf("%s: body %s, want exactly the fields %v", what, r.Body, fields)
		return
	}
	for _, f := range fields {
		if _, ok := r.JSON[f]; !ok {
			t.Errorf("%s: body %s lacks %q", what, r.Body, f)
		}
	}
}

// wantError checks docs/api.md's error body: {"error":{"code","message"}}.
func wantError(t testing.TB, r Reply, code lockstore.Code) {
	t.Helper()
	wantFields(t, "error", r, "error")
	e, _ := r.JSON["error"].(map[string]any)
	if len(e) != 2 || e["code"] != string(code) || str(e["message"]) == "" {
		t.Errorf("error body %s, want {\"error\":{\"code\":%q,\"message\":…}}", r.Body, code)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q", ct)
	}
}

func wantLocked(t testing.TB, base, key string, want bool) {
	t.Helper()
	r := Do(t, base, Call{Method: "GET", Path: "/v1/locks/status?key=" + key})
	wantExact(t, "status "+key, r, 200, fmt.Sprintf(`{"locked":%v}`, want))
}

// noSecrets fails if body contains any of the secrets.
func noSecrets(t testing.TB, what string, body []byte, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(string(body), s) {
			t.Errorf("%s body contains %q: %s", what, s, body)
		}
	}
}

// outage is a private store server a test may stop and start again.
type outage struct {
	url     string
	stop    func() // kill it hard (also done at cleanup)
	restart func() // start it again on the same port and data; nil if unsupported
	// env is what the gateway's environment needs to reach the server. It is
	// set with t.Setenv, so a test using it must not be parallel.
	env map[string]string
}

// startRedis runs a private redis-server on a free loopback port.
func startRedis(t *testing.T) outage {
	t.Helper()
	port := strconv.Itoa(testutil.FreePort(t))
	dir := t.TempDir()
	var kill func()
	run := func() {
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		kill = startProcess(t, cmd)
		waitTCP(t, "127.0.0.1:"+port, 10*time.Second, filepath.Join(dir, "redis.log"))
	}
	run()
	return outage{url: "redis://127.0.0.1:" + port + "/0", stop: func() { kill() }, restart: run}
}

// startPostgres runs a private PostgreSQL (initdb into a temp dir), as the
// postgres user when the tests run as root, the way scripts/testenv does.
func startPostgres(t *testing.T) outage {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Fatal("PostgreSQL binaries not found in /usr/lib/postgresql/*/bin: install postgresql (scripts/testenv needs them too)")
	}
	sort.Strings(bins)
	bin := filepath.Dir(bins[len(bins)-1])
	dir, err := os.MkdirTemp("", "fencegate-e2e-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root.
	asPG := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
		// Switch user in the child itself (not through runuser, which would
		// stay as the parent and take the SIGKILL meant for postgres).
		asPG = func(name string, args ...string) *exec.Cmd {
			cmd := exec.Command(name, args...)
			// PostgreSQL 15 changes back to its working directory at start:
			// the test's own (a clone under /root, say) may be closed to it.
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			cmd.Env = append(os.Environ(), "HOME="+dir)
			return cmd
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asPG(filepath.Join(bin, "initdb"), "-A", "trust", "-U", "postgres", "-D", data).CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := strconv.Itoa(testutil.FreePort(t))
	var kill func()
	run := func() {
		// Stopped by SIGQUIT, PostgreSQL's immediate shutdown: the postmaster
		// has every backend quit at once and exits only when they are all
		// gone. A SIGKILL would not do: each backend runs in a session of its
		// own (setsid), so it outlives a killed postmaster — process group
		// and all — long enough to answer one more query on a pooled
		// connection, and "the store is down" would not yet be true.
		kill = startProcessStop(t, asPG(filepath.Join(bin, "postgres"), "-D", data, "-p", port, "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"), syscall.SIGQUIT)
		waitTCP(t, "127.0.0.1:"+port, 30*time.Second, "")
		// Listening is not accepting: a server still "starting up" refuses
		// connections (57P03), and a gateway started then exits 3.
		deadline := time.Now().Add(30 * time.Second)
		for exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", port, "-U", "postgres").Run() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("PostgreSQL on port %s not accepting connections after 30s", port)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	run()
	return outage{
		url:     "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable",
		stop:    func() { kill() },
		restart: run,
	}
}

// startFirestoreEmulator runs a private Cloud Firestore emulator. Killing
// a JVM and starting another costs seconds, so it is not restarted.
func startFirestoreEmulator(t *testing.T) outage {
	t.Helper()
	jar := os.Getenv("FIRESTORE_JAR")
	if jar == "" {
		jar = "/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
	}
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("Firestore emulator jar: %v (set FIRESTORE_JAR; scripts/testenv needs it too)", err)
	}
	port := strconv.Itoa(testutil.FreePort(t))
	logFile := filepath.Join(t.TempDir(), "emulator.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd := exec.Command("java", "-cp", jar, "com.google.cloud.datastore.emulator.firestore.CloudFirestore", "start",
		"--host=127.0.0.1", "--port="+port)
	cmd.Stdout, cmd.Stderr = f, f
	kill := startProcess(t, cmd)
	waitTCP(t, "127.0.0.1:"+port, 60*time.Second, logFile)
	// The gateway finds the emulator through FIRESTORE_EMULATOR_HOST, which
	// StartGateway passes on from this process's environment.
	return outage{
		url:  "firestore://e2e-down-" + randHex(4),
		env:  map[string]string{"FIRESTORE_EMULATOR_HOST": "127.0.0.1:" + port},
		stop: kill,
	}
}

// startProcess starts cmd and returns a func that SIGKILLs it (its whole
// process group) and waits; the same runs at cleanup.
func startProcess(t testing.TB, cmd *exec.Cmd) func() {
	t.Helper()
	return startProcessStop(t, cmd, syscall.SIGKILL)
}

// startProcessStop is startProcess with the signal that stops the process:
// first is sent to cmd's process, and the process group is SIGKILLed only
// if it has not exited 15 s later.
func startProcessStop(t testing.TB, cmd *exec.Cmd, first syscall.Signal) func() {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	kill := func() {
		select {
		case <-waited:
			return
		default:
		}
		if first != syscall.SIGKILL {
			_ = cmd.Process.Signal(first)
			select {
			case <-waited:
				return
			case <-time.After(15 * time.Second):
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	}
	t.Cleanup(kill)
	return kill
}

// waitTCP waits until addr accepts connections.
func waitTCP(t testing.TB, addr string, timeout time.Duration, logFile string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			var log []byte
			if logFile != "" {
				log, _ = os.ReadFile(logFile)
			}
			t.Fatalf("nothing listening on %s after %v: %v\n%s", addr, timeout, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func str(v any) string { s, _ := v.(string); return s }

func num(v any) float64 { f, _ := v.(float64); return f }
