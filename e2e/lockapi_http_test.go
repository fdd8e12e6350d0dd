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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// fenceRE is the wire form of a fence (DESIGN.md: 15 digits).
var fenceRE = regexp.MustCompile(`^[0-9]{15}$`)

// rawKeyRE matches the keys the lock tests use.
var rawKeyRE = regexp.MustCompile(`(orders|fences|errors|wait|audit)/[0-9a-f]{12}`)

// TestLockAPIHTTP walks every row of API.md's lock table over HTTP, on
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
	// A different key has its own counter, starting at 1.
	if a := acquireHTTP(t, base, key+"/other", 10000); a.Fence != "000000000000001" {
		t.Errorf("first fence on a new key = %s, want 000000000000001", a.Fence)
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
		r, err := doE(base, Call{Method: "POST", Path: "/v1/locks/acquire", Body: fmt.Sprintf(`{"key":%q,"ttlMs":10000,"waitMs":5000}`, key)})
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
	if stale.Path != "/orders/1" {
		t.Errorf("stale event path %q, want /orders/1 (no query)", stale.Path)
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

// TestLockAPIStoreDown: a gateway whose Redis goes away answers the lock API
// 503 ServiceUnavailable (promptly, not after a client timeout) and /readyz
// 503. It runs its own redis-server so killing it disturbs no other test.
func TestLockAPIStoreDown(t *testing.T) {
	t.Parallel()
	redisAddr, kill := startRedis(t)
	g := StartGateway(t, "redis://"+redisAddr+"/0")
	base := g.URL()
	waitReady(t, base)
	a := acquireHTTP(t, base, "down/1", 30000)

	kill()

	for _, c := range []Call{
		{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"down/2"}`},
		{Method: "POST", Path: "/v1/locks/release", Body: fmt.Sprintf(`{"lockId":%q}`, a.LockID)},
		{Method: "GET", Path: "/v1/locks/status?key=down/1"},
	} {
		start := time.Now()
		r := Do(t, base, c)
		dur := time.Since(start)
		if r.Status != 503 {
			t.Errorf("%s %s with Redis down = %d %s, want 503", c.Method, c.Path, r.Status, r.Body)
			continue
		}
		wantError(t, r, lockstore.ServiceUnavailable)
		if dur > 5*time.Second {
			t.Errorf("%s %s took %v to fail", c.Method, c.Path, dur)
		}
		t.Logf("%s %s failed in %v", c.Method, c.Path, dur)
	}
	if r := Do(t, base, Call{Method: "GET", Path: "/readyz"}); r.Status != 503 {
		t.Errorf("/readyz with Redis down = %d %s", r.Status, r.Body)
	}
	if r := Do(t, base, Call{Method: "GET", Path: "/healthz"}); r.Status != 200 {
		t.Errorf("/healthz with Redis down = %d %s (the process is up)", r.Status, r.Body)
	}
	for _, l := range strings.Split(g.Logs(), "\n") {
		if strings.Contains(l, "down/1") || strings.Contains(l, a.LockID) {
			t.Errorf("gateway log names a raw key or lockId: %s", l)
		}
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
// off the test goroutine).
func doE(base string, c Call) (Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

// wantError checks API.md's error body: {"error":{"code","message"}}.
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

// waitReady polls /readyz: the first call to a cold Firestore emulator can
// take longer than the 2 s readiness budget.
func waitReady(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := Do(t, base, Call{Method: "GET", Path: "/readyz"})
		if r.Status == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after 30s: %s", r.Status, r.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// startRedis runs a private redis-server on a free loopback port and
// returns its address and a func that SIGKILLs it (also run at cleanup).
func startRedis(t testing.TB) (string, func()) {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v (is it installed?)", err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-waited
	}
	t.Cleanup(kill)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr, kill
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server on %s did not start: %v\n%s", addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort asks the kernel for an unused loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func str(v any) string { s, _ := v.(string); return s }

func num(v any) float64 { f, _ := v.(float64); return f }
