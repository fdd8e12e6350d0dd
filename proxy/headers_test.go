package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"time"
)

// cgiEnv reads a request's headers as CGI, WSGI, Rack and PHP do:
// HTTP_<NAME> with "-" as "_", upper case (and, as some gateways do, "."
// and "~" too); two spellings of one name land in one variable (WSGI
// servers join them with ",").
func cgiEnv(h http.Header) map[string][]string {
	env := map[string][]string{}
	for name, vs := range h {
		k := "HTTP_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_", "~", "_").Replace(name))
		env[k] = append(env[k], vs...)
	}
	return env
}

// wsgiUpstream records the CGI environment of every request it gets.
func wsgiUpstream(t *testing.T) (*httptest.Server, chan map[string][]string) {
	t.Helper()
	ch := make(chan map[string][]string, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		ch <- cgiEnv(r.Header)
	}))
	t.Cleanup(up.Close)
	return up, ch
}

// TestProxyHeadersAsCGISeesThem: whatever spelling a client uses, a
// CGI/WSGI upstream finds in HTTP_X_FENCE_VERIFIED only the proxy's value
// (none on a read), in HTTP_X_FORWARDED_* only the proxy's, no client
// address or URL claims (X-Real-IP, True-Client-IP, X-Original-URL), and on
// a template route no client x-fence-key. A method override is refused. The
// broken variant (every client header through, as httputil.ReverseProxy
// alone) is caught by the same assertions.
func TestProxyHeadersAsCGISeesThem(t *testing.T) {
	s := locktest.OpenBolt(t, locktest.FloorOff)
	l := locktest.Acquire(t, s, "orders/42", time.Minute)
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			up, envs := wsgiUpstream(t)
			u := up.URL
			_, srv := serveProxy(t, fencecheck.New(s, fencecheck.Options{}), []config.Route{
				{Name: "tpl", Match: prefix("/orders"), Upstream: u, Key: "orders/{2}"},
				{Name: "hdr", Match: prefix("/"), Upstream: u},
				{Name: "custom", Match: prefix("/custom"), Upstream: u, Key: "orders/42", FenceHeader: "If-Fence"},
			}, Options{skipHeaders: broken})

			forged := map[string]string{
				"X_Fence_Verified": "999999999999999", "x_fence_verified": "999999999999998",
				"X_Fence_Would_Deny": "none", "X_Fence_Decision_Id": "forged",
				"X_Forwarded_For": "6.6.6.6", "X_Forwarded_Host": "evil", "X-Forwarded-Prefix": "/admin",
				"X-Forwarded-Port": "443", "X_Forwarded_Proto": "https", "Forwarded": "for=6.6.6.6",
				"X-Real-IP": "6.6.6.6", "X_Real_IP": "6.6.6.6", "True-Client-IP": "6.6.6.6", "CF-Connecting-IP": "6.6.6.6",
				"X-Original-URL": "/admin", "X_Rewrite_URL": "/admin",
				"X_Fence_Token": "000000000000001", "X_Fence_Key": "orders/1", "X_Fence_Lock_Id": "x",
				"X.Fence.Verified": "999999999999997", "x-fence~verified": "999999999999996",
			}
			send := func(method, path string, extra map[string]string) (int, map[string][]string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader("x"))
				for k, v := range forged {
					req.Header[k] = []string{v} // as spelled, not canonicalised
				}
				for k, v := range extra {
					req.Header[k] = []string{v}
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					return res.StatusCode, nil
				}
				return res.StatusCode, <-envs
			}
			var problems []string
			expect := func(what string, env map[string][]string, name string, want ...string) {
				if got := env[name]; !slices.Equal(got, want) {
					problems = append(problems, fmt.Sprintf("%s: %s = %q, want %q", what, name, got, want))
				}
			}
			claims := func(what string, env map[string][]string) {
				for _, n := range []string{"HTTP_X_FENCE_WOULD_DENY", "HTTP_X_FENCE_LOCK_ID", "HTTP_X_FORWARDED_PREFIX", "HTTP_X_FORWARDED_PORT",
					"HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_TRUE_CLIENT_IP", "HTTP_CF_CONNECTING_IP", "HTTP_X_ORIGINAL_URL", "HTTP_X_REWRITE_URL"} {
					expect(what, env, n)
				}
				expect(what, env, "HTTP_X_FORWARDED_FOR", "127.0.0.1")
				expect(what, env, "HTTP_X_FORWARDED_PROTO", "http")
				expect(what, env, "HTTP_X_FORWARDED_HOST", strings.TrimPrefix(srv.URL, "http://"))
			}

			// A read on a template route: nothing verified, no key.
			if st, env := send("GET", "/orders/42", nil); st != 200 {
				t.Fatalf("read: %d", st)
			} else {
				claims("read", env)
				expect("read", env, "HTTP_X_FENCE_VERIFIED")
				expect("read", env, "HTTP_X_FENCE_KEY")
				expect("read", env, "HTTP_X_FENCE_DECISION_ID")
			}
			// A write on a template route: verified is the proxy's only;
			// the fence is the one the check read, once; no client key.
			if st, env := send("PUT", "/orders/42", map[string]string{"X-Fence-Token": l.Fence, "X-Fence-Key": "orders/1"}); st != 200 {
				t.Fatalf("template write: %d", st)
			} else {
				claims("template write", env)
				expect("template write", env, "HTTP_X_FENCE_VERIFIED", l.Fence)
				expect("template write", env, "HTTP_X_FENCE_TOKEN", l.Fence)
				expect("template write", env, "HTTP_X_FENCE_KEY")
				if len(env["HTTP_X_FENCE_DECISION_ID"]) != 1 {
					problems = append(problems, fmt.Sprintf("template write: decision id %q", env["HTTP_X_FENCE_DECISION_ID"]))
				}
			}
			// A write on a key-header route: the key the check read goes
			// upstream, once.
			if st, env := send("PUT", "/x", map[string]string{"X-Fence-Token": l.Fence, "X-Fence-Key": "orders/42"}); st != 200 {
				t.Fatalf("header write: %d", st)
			} else {
				claims("header write", env)
				expect("header write", env, "HTTP_X_FENCE_VERIFIED", l.Fence)
				expect("header write", env, "HTTP_X_FENCE_KEY", "orders/42")
			}
			// A custom fence header: its other spellings, and the
			// default fence header it replaces, are stripped.
			if st, env := send("PUT", "/custom/1", map[string]string{"If-Fence": l.Fence, "If_Fence": "000000000000001"}); st != 200 {
				t.Fatalf("custom write: %d", st)
			} else {
				expect("custom write", env, "HTTP_IF_FENCE", l.Fence)
				expect("custom write", env, "HTTP_X_FENCE_TOKEN")
			}
			// Method overrides, in any spelling, are refused.
			for _, h := range []string{"X-HTTP-Method-Override", "X_HTTP_Method_Override", "X-HTTP-Method", "x-method-override"} {
				if st, _ := send("GET", "/orders/42", map[string]string{h: "DELETE"}); st != http.StatusBadRequest {
					problems = append(problems, fmt.Sprintf("%s: DELETE on a read answered %d, want 400", h, st))
				}
			}
			if broken {
				if len(problems) == 0 {
					t.Fatal("the broken proxy passed: the test cannot fail")
				}
				t.Logf("broken proxy caught: %d problems:\n%s", len(problems), strings.Join(problems, "\n"))
				return
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}
