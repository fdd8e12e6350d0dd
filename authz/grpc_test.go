package authz

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

func headerMap(hs []*corev3.HeaderValueOption) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return m
}

// TestGRPCCheck runs every reason and status through a real gRPC server and
// a real bolt store.
func TestGRPCCheck(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	ctx := t.Context()

	// orders/1: held with fence 2 (fence 1 was lost to a release).
	// orders/2: released, nobody holds it; its latest fence is 1.
	// orders/42: held; reached through the key template.
	k := locktest.NewDecisionKeys(t, s)
	old, cur, gone, tpl := k.Old, k.Cur, k.Gone, k.Tpl

	otherID, _ := lockstore.NewLockID()
	tests := []struct {
		name     string
		method   string
		path     string
		headers  map[string]string
		ext      map[string]string
		reason   fencecheck.Reason // "" = allowed
		status   int
		current  string
		verified string
	}{
		{name: "read without fence", method: "GET", path: "/orders/1"},
		{name: "head without fence", method: "HEAD", path: "/orders/1"},
		{name: "current fence", method: "POST", path: "/orders/1",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: cur.Fence}, verified: cur.Fence},
		{name: "missing", method: "PUT", path: "/orders/1", headers: map[string]string{fencewire.HeaderKey: "orders/1"},
			reason: fencecheck.ReasonMissing, status: 428},
		{name: "malformed", method: "PUT", path: "/orders/1", headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: "2"},
			reason: fencecheck.ReasonMalformed, status: 400},
		{name: "no key", method: "PUT", path: "/orders/1", headers: map[string]string{fencewire.HeaderToken: cur.Fence},
			reason: fencecheck.ReasonMalformed, status: 400},
		{name: "stale", method: "DELETE", path: "/orders/1", headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: old.Fence},
			reason: fencecheck.ReasonStale, status: 409, current: cur.Fence},
		{name: "unknown", method: "PATCH", path: "/orders/1", headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: "000000000000099"},
			reason: fencecheck.ReasonUnknown, status: 409, current: cur.Fence},
		{name: "never locked", method: "PATCH", path: "/x", headers: map[string]string{fencewire.HeaderKey: "never", fencewire.HeaderToken: "000000000000001"},
			reason: fencecheck.ReasonUnknown, status: 409},
		{name: "not held", method: "POST", path: "/orders/2", headers: map[string]string{fencewire.HeaderKey: "orders/2", fencewire.HeaderToken: gone.Fence},
			reason: fencecheck.ReasonNotHeld, status: 409, current: gone.Fence},
		{name: "latest after release", method: "POST", path: "/orders/2", headers: map[string]string{fencewire.HeaderKey: "orders/2", fencewire.HeaderToken: gone.Fence},
			ext: map[string]string{fencewire.ExtPolicy: "latest"}, verified: gone.Fence},
		{name: "latest stale", method: "POST", path: "/orders/1", headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: old.Fence},
			ext: map[string]string{fencewire.ExtPolicy: "latest"}, reason: fencecheck.ReasonStale, status: 409, current: cur.Fence},
		{name: "lockId match", method: "POST", path: "/orders/1",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: cur.Fence, fencewire.HeaderLockID: cur.LockID}, verified: cur.Fence},
		{name: "lockId mismatch", method: "POST", path: "/orders/1",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: cur.Fence, fencewire.HeaderLockID: otherID},
			reason:  fencecheck.ReasonWrongOwner, status: 409, current: cur.Fence},
		{name: "dry-run stale passes", method: "POST", path: "/orders/1",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: old.Fence}, ext: map[string]string{fencewire.ExtMode: "dry-run"}},
		{name: "policy off", method: "POST", path: "/orders/1", ext: map[string]string{fencewire.ExtPolicy: "off"}},
		{name: "key template", method: "PUT", path: "/orders/42?verbose=1",
			headers: map[string]string{fencewire.HeaderToken: tpl.Fence}, ext: map[string]string{fencewire.ExtKey: "orders/{2}"}, verified: tpl.Fence},
		{name: "key template beats header", method: "PUT", path: "/orders/42",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: cur.Fence}, ext: map[string]string{fencewire.ExtKey: "orders/{2}"},
			reason: fencecheck.ReasonUnknown, status: 409, current: tpl.Fence}, // fence 2 is orders/1's; orders/42 issued only 1
		{name: "key template missing segment", method: "PUT", path: "/orders",
			headers: map[string]string{fencewire.HeaderToken: tpl.Fence}, ext: map[string]string{fencewire.ExtKey: "orders/{2}"},
			reason: fencecheck.ReasonMalformed, status: 400},
		{name: "custom fence header", method: "PUT", path: "/orders/42",
			headers: map[string]string{"if-fence": tpl.Fence, fencewire.HeaderToken: "000000000000001"},
			ext:     map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtHeader: "If-Fence"}, verified: tpl.Fence},
		{name: "fence_methods excludes PUT", method: "PUT", path: "/orders/42",
			ext: map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtMethods: "POST,DELETE"}},
		{name: "fence_methods includes POST", method: "POST", path: "/orders/42",
			ext: map[string]string{fencewire.ExtKey: "orders/{2}", fencewire.ExtMethods: "POST,DELETE"}, reason: fencecheck.ReasonMissing, status: 428},
		{name: "bad policy fails closed", method: "POST", path: "/orders/1",
			headers: map[string]string{fencewire.HeaderKey: "orders/1", fencewire.HeaderToken: cur.Fence}, ext: map[string]string{fencewire.ExtPolicy: "newest"},
			reason: fencecheck.ReasonUnavailable, status: 503},
	}

	conn := serveGRPC(t, fencecheck.New(s, fencecheck.Options{}))
	client := authv3.NewAuthorizationClient(conn)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.Check(ctx, envoyRequest(tc.method, tc.path, tc.headers, tc.ext))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if tc.reason == "" {
				ok := resp.GetOkResponse()
				if resp.GetStatus().GetCode() != int32(code.Code_OK) || ok == nil {
					t.Fatalf("want OK, got %v", resp)
				}
				if !slices.Contains(ok.GetHeadersToRemove(), fencewire.HeaderLockID) {
					t.Errorf("%s not stripped: %v", fencewire.HeaderLockID, ok.GetHeadersToRemove())
				}
				hs := headerMap(ok.GetHeaders())
				if got := hs[fencewire.HeaderVerified]; got != tc.verified {
					t.Errorf("%s = %q, want %q", fencewire.HeaderVerified, got, tc.verified)
				}
				if tc.verified == "" && !slices.Contains(ok.GetHeadersToRemove(), fencewire.HeaderVerified) {
					t.Errorf("unverified request: a client's own %s must be removed", fencewire.HeaderVerified)
				}
				if tc.ext[fencewire.ExtMode] == "dry-run" && hs[fencewire.HeaderWouldDeny] != "stale" {
					t.Errorf("dry-run: %s = %q, want stale", fencewire.HeaderWouldDeny, hs[fencewire.HeaderWouldDeny])
				}
				return
			}
			wantCode := code.Code_PERMISSION_DENIED
			if tc.status == 503 {
				wantCode = code.Code_UNAVAILABLE
			}
			denied := resp.GetDeniedResponse()
			if resp.GetStatus().GetCode() != int32(wantCode) || denied == nil {
				t.Fatalf("want %v denial, got %v", wantCode, resp)
			}
			if got := int(denied.GetStatus().GetCode()); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
			hs := headerMap(denied.GetHeaders())
			if hs[fencewire.HeaderReason] != string(tc.reason) || hs[fencewire.HeaderDecisionID] == "" || hs["content-type"] != "application/json" {
				t.Fatalf("headers %v", hs)
			}
			var body denialBody
			if err := json.Unmarshal([]byte(denied.GetBody()), &body); err != nil {
				t.Fatalf("body %q: %v", denied.GetBody(), err)
			}
			want := denialBody{Error: string(tc.reason), Presented: tc.headers[fencewire.HeaderToken], Current: tc.current, DecisionID: hs[fencewire.HeaderDecisionID]}
			if h := tc.ext[fencewire.ExtHeader]; h != "" {
				want.Presented = tc.headers[h]
			}
			if tc.status != 400 || tc.ext[fencewire.ExtKey] == "" {
				want.Key = tc.headers[fencewire.HeaderKey]
				if tc.ext[fencewire.ExtKey] != "" {
					want.Key, _ = fencecheck.ExpandKey(tc.ext[fencewire.ExtKey], tc.path)
				}
			}
			if body != want {
				t.Fatalf("body %+v\nwant %+v", body, want)
			}
		})
	}
}

// TestGRPCAudit: a denial over gRPC lands in the store's audit log with the
// Envoy-reported peer, the route name and the key's hash only.
func TestGRPCAudit(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	cur := locktest.Acquire(t, s, "k", time.Minute)
	a := fencecheck.NewAuditor(s, fencecheck.AuditorOptions{})
	conn := serveGRPC(t, fencecheck.New(s, fencecheck.Options{Audit: a}))
	resp, err := authv3.NewAuthorizationClient(conn).Check(t.Context(), envoyRequest("POST", "/k?q=1",
		map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: old.Fence}, map[string]string{fencewire.ExtRoute: "orders-write"}))
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close() // flush
	evs, err := s.QueryAudit(t.Context(), lockstore.AuditQuery{Key: "k"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("audit: %v %v", evs, err)
	}
	ev := evs[0]
	id := headerMap(resp.GetDeniedResponse().GetHeaders())[fencewire.HeaderDecisionID]
	want := lockstore.AuditEvent{TimeMs: ev.TimeMs, DecisionID: id, Source: SourceGRPC, Route: "orders-write",
		KeyHash: lockstore.HashKey("k"), KeyDigest: lockstore.DigestKey("k").String(), Presented: old.Fence, Current: cur.Fence, Reason: "stale", Policy: "holder",
		Mode: "enforce", Peer: "10.1.2.3:40000", Method: "POST"} // no Path: it may hold the raw key
	if ev != want {
		t.Fatalf("event %+v\nwant  %+v", ev, want)
	}
}

// TestGRPCBackendDown: a closed store answers 503 UNAVAILABLE at once,
// without waiting for the check's deadline.
func TestGRPCBackendDown(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	r := locktest.Acquire(t, s, "k", time.Minute)
	_ = s.Close()
	// A long deadline, so that "at once" has room on a loaded machine and
	// a check that waited for the deadline still fails the test.
	const timeout = 5 * time.Second
	conn := serveGRPC(t, fencecheck.New(s, fencecheck.Options{Timeout: timeout}))
	client := authv3.NewAuthorizationClient(conn)
	// Warm the connection (a read never touches the store) so the
	// measurement is the check alone.
	if _, err := client.Check(t.Context(), envoyRequest("GET", "/", nil, nil)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := client.Check(t.Context(), envoyRequest("POST", "/k",
		map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: r.Fence}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > timeout/2 {
		t.Errorf("a down backend took %v to report (deadline %v): it should not wait for the deadline", el, timeout)
	}
	assertUnavailable(t, resp)
}

// TestGRPCBackendHangs: a backend that never answers is cut off at the
// check's deadline, not later, and answered 503.
func TestGRPCBackendHangs(t *testing.T) {
	const timeout = 120 * time.Millisecond
	s := locktest.OpenBolt(t, locktest.FloorOff)
	r := locktest.Acquire(t, s, "k", time.Minute)
	conn := serveGRPC(t, fencecheck.New(hangingStore{s}, fencecheck.Options{Timeout: timeout}))
	client := authv3.NewAuthorizationClient(conn)
	// Warm the connection so the measurement is the check alone.
	if _, err := client.Check(t.Context(), envoyRequest("GET", "/", nil, nil)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := client.Check(t.Context(), envoyRequest("POST", "/k", map[string]string{fencewire.HeaderKey: "k", fencewire.HeaderToken: r.Fence}, nil))
	el := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	assertUnavailable(t, resp)
	// At the deadline, not later; the slack is for a loaded CI machine
	// under -race (the store itself would block forever).
	if el < timeout || el > timeout+400*time.Millisecond {
		t.Fatalf("elapsed %v, want %v ≤ elapsed ≤ %v", el, timeout, timeout+400*time.Millisecond)
	}
}

func assertUnavailable(t *testing.T, resp *authv3.CheckResponse) {
	t.Helper()
	d := resp.GetDeniedResponse()
	if resp.GetStatus().GetCode() != int32(code.Code_UNAVAILABLE) || d == nil || d.GetStatus().GetCode() != 503 {
		t.Fatalf("want UNAVAILABLE/503, got %v", resp)
	}
	if r := headerMap(d.GetHeaders())[fencewire.HeaderReason]; r != "unavailable" {
		t.Fatalf("reason %q", r)
	}
}

func TestGRPCHealth(t *testing.T) {
	conn := serveGRPC(t, fencecheck.New(locktest.OpenBolt(t, locktest.FloorOff), fencecheck.Options{}))
	for _, svc := range []string{"", ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}
}

// TestGRPCHeaderMap: Envoy with encode_raw_headers sends header_map with
// raw values instead of the headers map.
func TestGRPCHeaderMap(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	r := locktest.Acquire(t, s, "k", time.Minute)
	req := envoyRequest("POST", "/k", nil, nil)
	hr := req.GetAttributes().GetRequest().GetHttp()
	hr.Headers = nil
	hr.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: fencewire.HeaderKey, RawValue: []byte("k")},
		{Key: fencewire.HeaderToken, RawValue: []byte(r.Fence)},
	}}
	conn := serveGRPC(t, fencecheck.New(s, fencecheck.Options{}))
	resp, err := authv3.NewAuthorizationClient(conn).Check(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerMap(resp.GetOkResponse().GetHeaders())[fencewire.HeaderVerified]; got != r.Fence {
		t.Fatalf("verified %q, want %q (%v)", got, r.Fence, resp)
	}
}

// TestGRPCDuplicateFenceHeaders: a fence input sent twice is ambiguous (the
// upstream may read the other copy) and is denied 400 malformed, in both of
// Envoy's header encodings: header_map lists every copy; the headers map
// joins them with a comma.
func TestGRPCDuplicateFenceHeaders(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	old := locktest.Acquire(t, s, "k", time.Minute)
	locktest.Release(t, s, old.LockID)
	cur := locktest.Acquire(t, s, "k", time.Minute)
	joined := locktest.Acquire(t, s, "k,other", time.Minute) // a key a client could hold
	client := authv3.NewAuthorizationClient(serveGRPC(t, fencecheck.New(s, fencecheck.Options{})))

	rawReq := func(ext map[string]string, hs ...[2]string) *authv3.CheckRequest {
		req := envoyRequest("POST", "/k", nil, ext)
		hr := req.GetAttributes().GetRequest().GetHttp()
		hr.Headers = nil
		hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}}}
		for _, h := range hs {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: h[0], RawValue: []byte(h[1])})
		}
		hr.HeaderMap = hm
		return req
	}
	tests := []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"header_map: token twice, current last", rawReq(nil,
			[2]string{fencewire.HeaderKey, "k"}, [2]string{fencewire.HeaderToken, old.Fence}, [2]string{fencewire.HeaderToken, cur.Fence})},
		{"header_map: key twice", rawReq(nil,
			[2]string{fencewire.HeaderKey, "other"}, [2]string{fencewire.HeaderKey, "k"}, [2]string{fencewire.HeaderToken, cur.Fence})},
		{"header_map: lockId twice", rawReq(nil,
			[2]string{fencewire.HeaderKey, "k"}, [2]string{fencewire.HeaderToken, cur.Fence},
			[2]string{fencewire.HeaderLockID, old.LockID}, [2]string{fencewire.HeaderLockID, cur.LockID})},
		{"header_map: route's fence header twice", rawReq(map[string]string{fencewire.ExtHeader: "if-fence"},
			[2]string{fencewire.HeaderKey, "k"}, [2]string{"if-fence", old.Fence}, [2]string{"if-fence", cur.Fence})},
		{"headers: key joined by Envoy", envoyRequest("POST", "/k",
			map[string]string{fencewire.HeaderKey: "k,other", fencewire.HeaderToken: joined.Fence}, nil)},
	}
	for _, tc := range tests {
		resp, err := client.Check(t.Context(), tc.req)
		if err != nil {
			t.Fatal(err)
		}
		d := resp.GetDeniedResponse()
		if d == nil || d.GetStatus().GetCode() != 400 || headerMap(d.GetHeaders())[fencewire.HeaderReason] != "malformed" {
			t.Errorf("%s: want 400 malformed, got %v", tc.name, resp)
		}
	}
	// One copy of each is fine.
	resp, err := client.Check(t.Context(), rawReq(nil, [2]string{fencewire.HeaderKey, "k"}, [2]string{fencewire.HeaderToken, cur.Fence},
		[2]string{fencewire.HeaderLockID, cur.LockID}))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("single headers: %v %v", resp, err)
	}
}
