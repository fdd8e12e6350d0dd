package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoutesCheck: `fencegate routes check` loads the table as serve
// does, shows the entry a sample request matches and the key it yields
// (the table's, whatever x-fence-key says), and lists every problem of a
// table that does not load (exit 2).
func TestRoutesCheck(t *testing.T) {
	good := writeConfig(t, `
proof:
  verifyKeys: [{kid: k1, publicKey: u3YXKVdR7oMQHDVJUhMCNCg-0jhoS5XsF3jBlCXyj5o}]
routes:
  - name: orders
    match: {hosts: [api.example.com], path: {type: Template, value: "/orders/{int}"}}
    key: "orders/{2:int}"
    proof: signed
  - name: by-header
    match: {path: {value: /things}}
`)
	var out, errOut bytes.Buffer
	code := runRoutes(t.Context(), []string{"check", "--config", good,
		"--request", "PUT https://api.example.com/orders/42",
		"--request", "GET https://api.example.com/orders/42",
		"--request", "POST http://x/things/1", "--header", "x-fence-key: things/1"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"route table: 2 entries, hash ", "unmatched writes: deny",
		`PUT https://api.example.com/orders/42 → route orders: a write; key "orders/42", fence from x-fence-token, policy holder, mode enforce, proof signed`,
		"GET https://api.example.com/orders/42 → route orders: a read",
		`route by-header: a write; key "things/1"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	code = runRoutes(t.Context(), []string{"check", "--config", good, "--request", "PUT https://other.example.com/orders/42",
		"--request", "PUT https://api.example.com/orders//42"}, &out, &errOut)
	if code != exitNo || !strings.Contains(out.String(), "no entry: writes fail closed") || !strings.Contains(out.String(), "refused: writes are denied 400") {
		t.Errorf("unmatched: exit %d:\n%s", code, out.String())
	}

	bad := writeConfig(t, `
check: {unmatchedWrites: maybe}
routes:
  - name: a
    policy: newest
  - name: a
  - match: {path: {type: Regex, value: /x}}
    preserveHost: true
`)
	out.Reset()
	errOut.Reset()
	if code := runRoutes(t.Context(), []string{"check", "--config", bad}, &out, &errOut); code != exitUsage {
		t.Fatalf("bad table: exit %d", code)
	}
	for _, want := range []string{"check.unmatchedWrites", `routes[1] (a).name: "a" is used by another entry`, "routes[2].name: required", "routes[2]: preserveHost"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	// The options routes.Compile checks, once config's own problems are fixed.
	bad2 := writeConfig(t, `
routes:
  - {name: a, policy: newest}
  - {name: b, match: {path: {type: Regex, value: /x}}}
`)
	errOut.Reset()
	if code := runRoutes(t.Context(), []string{"check", "--config", bad2}, &out, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "newest") || !strings.Contains(errOut.String(), `"Regex"`) {
		t.Errorf("bad options: exit %d: %s", code, errOut.String())
	}
	if code := runRoutes(t.Context(), []string{"nope"}, &out, &errOut); code != exitUsage {
		t.Errorf("unknown subcommand: exit %d", code)
	}

	// Another spelling of the host selects the same entry (#26); entries
	// that differ by host alone are warned of (behind a sidecar the client
	// picks by its Host).
	choice := writeConfig(t, `
routes:
  - {name: strict, match: {hosts: [api.example.com], path: {value: /orders}}, key: orders, proof: lockId}
  - {name: open, match: {path: {value: /}}, policy: "off"}
`)
	out.Reset()
	code = runRoutes(t.Context(), []string{"check", "--config", choice, "--request", "PUT https://API.example.com..:8443/orders/42"}, &out, &errOut)
	if code != exitOK || !strings.Contains(out.String(), "route strict: a write") ||
		!strings.Contains(out.String(), `warning: entries "strict" (hosts api.example.com) and "open" (every host) govern the same paths`) {
		t.Errorf("host spelling and choice: exit %d:\n%s", code, out.String())
	}
}

// TestRoutesCheckRefusals (#27 item 9): a sample the gateway would refuse
// 400 malformed exits 1 (the old check answered 0 and printed the
// refusal); a --request that is not "METHOD URL" is a bad flag, 2 (the
// old check: 1); a table that requires signed proofs without a key to
// verify them does not load, 2 (the old check: 0, and serve then refused
// every routed write 503); an error names its package once.
func TestRoutesCheckRefusals(t *testing.T) {
	noKey := writeConfig(t, `
routes:
  - name: orders
    match: {path: {type: Template, value: "/orders/{int}"}}
    key: "orders/{1:int}"
`)
	signedNoKeys := writeConfig(t, `
routes:
  - name: orders
    match: {hosts: [api.example.com], path: {type: Template, value: "/orders/{int}"}}
    key: "orders/{2:int}"
    proof: signed
`)
	badMethods := writeConfig(t, `
routes:
  - {name: b, methods: "FOO"}
`)
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, noOut string // in and not in stdout+stderr
	}{
		{"a write refused 400 malformed", []string{"--config", noKey, "--request", "PUT https://x/orders/42"}, exitNo, "refused 400 malformed", ""},
		{"a read on the same entry", []string{"--config", noKey, "--request", "GET https://x/orders/42"}, exitOK, "a read", ""},
		{"a request without a host", []string{"--config", noKey, "--request", "PUT /orders/42"}, exitUsage, `is not "METHOD URL"`, ""},
		{"a request without a method", []string{"--config", noKey, "--request", "https://x/orders/42"}, exitUsage, `is not "METHOD URL"`, ""},
		{"signed proofs without keys", []string{"--config", signedNoKeys}, exitUsage, "proof: signed needs a key", ""},
		{"one package prefix per error", []string{"--config", badMethods}, exitUsage, `bad route option: fencecheck: write methods "FOO"`, "fencecheck: bad route option: fencecheck:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := runRoutes(t.Context(), append([]string{"check"}, tc.args...), &out, &errOut)
			all := out.String() + errOut.String()
			if code != tc.code || !strings.Contains(all, tc.out) || (tc.noOut != "" && strings.Contains(all, tc.noOut)) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s", code, tc.code, tc.out, all)
			}
		})
	}
	// serve refuses the same table at start, rather than refusing every
	// routed write 503 once it runs.
	cfg := writeConfig(t, "store: bolt://"+t.TempDir()+"/x.db\n"+`
routes:
  - name: orders
    match: {path: {type: Template, value: "/orders/{int}"}}
    key: "orders/{2:int}"
    proof: signed
`)
	var stderr bytes.Buffer
	if code := runServe(t.Context(), []string{"--config", cfg}, io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "proof: signed needs a key") {
		t.Fatalf("serve: exit %d: %s", code, stderr.String())
	}
}

// TestServeRefusesABadTable: serve lists a table's problems at start
// (exit 2), and refuses proxy.routes beside routes: with upstreams.
func TestServeRefusesABadTable(t *testing.T) {
	cfg := writeConfig(t, `
store: bolt://`+t.TempDir()+`/x.db
routes:
  - {name: a, policy: newest}
  - {name: b, match: {path: {type: Template, value: "/o/{int}"}}}
  - {name: c, match: {path: {type: Template, value: "/o/{int}"}}}
  - {name: d, upstream: "http://127.0.0.1:1"}
proxy:
  routes:
    - {prefix: /p, upstream: "http://127.0.0.1:1"}
`)
	var stderr bytes.Buffer
	if code := runServe(t.Context(), []string{"--config", cfg}, io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "exclude each other") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg = writeConfig(t, `
store: bolt://`+t.TempDir()+`/x.db
routes:
  - {name: a, policy: newest}
  - {name: b, match: {path: {type: Template, value: "/o/{int}"}}}
  - {name: c, match: {path: {type: Template, value: "/o/{int}"}}}
`)
	stderr.Reset()
	if code := runServe(t.Context(), []string{"--config", cfg}, io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "newest") || !strings.Contains(stderr.String(), `routes "b" and "c"`) {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestProxyServesTableEntries: `fencegate proxy` serves the route table's
// entries that have an upstream (by host, method and path type too), as it
// serves proxy.routes, and refuses 404 what matches an entry without one.
func TestProxyServesTableEntries(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "fence.db")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "verified=%s", r.Header.Get("X-Fence-Verified"))
	}))
	t.Cleanup(up.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := writeConfig(t, fmt.Sprintf(`
store: bolt://%s?fenceFloor=off
proxy: {addr: %s}
routes:
  - name: orders
    match: {path: {value: /orders}}
    upstream: %s
    key: "orders/{2:int}"
  - name: api
    match: {hosts: [api.example.com], methods: [PUT], path: {type: Exact, value: /orders/1}}
    upstream: %s
    key: api-key
  - name: elsewhere
    match: {hosts: [api.example.com]}
    key: never-served-by-the-proxy
`, dbPath, addr, up.URL, up.URL))
	stop := startCommand(t, runProxy, []string{"--config", cfg}, "fencegate proxy ready")
	put := func(path, fence string, host ...string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", "http://"+addr+path, nil)
		if len(host) > 0 {
			req.Host = host[0]
		}
		req.Header.Set("X-Fence-Token", fence)
		req.Header.Set("X-Fence-Key", "orders/7")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(b)
	}
	if code, body := put("/orders/42", "000000000000001"); code != 409 || !strings.Contains(body, `"key":"orders/42"`) {
		t.Errorf("the entry's key: %d %s", code, body)
	}
	if code, _ := put("/other", "000000000000001"); code != 404 {
		t.Errorf("no upstream entry: %d, want 404", code)
	}
	// Entries with an upstream match by host, method and path type too.
	if code, body := put("/orders/1", "000000000000001", "API.example.com:8000"); code != 409 || !strings.Contains(body, `"key":"api-key"`) {
		t.Errorf("the host- and method-scoped entry: %d %s", code, body)
	}
	if code, _ := put("/x", "000000000000001", "api.example.com"); code != 404 {
		t.Errorf("the host's entry without an upstream: %d, want 404", code)
	}
	if code, log := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, log)
	}
}

// TestReadmeIstioTable: the route table README.md shows under "Behind
// Istio" loads, and PUT /orders/42 on its host governs the lock orders/42,
// as the README says. A table the gateway refuses (the broken variant: the
// same entry with a proof mode that does not exist) fails it.
func TestReadmeIstioTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Behind Istio")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no yaml block under \"## Behind Istio\"")
	}
	for _, tc := range []struct {
		name, table string
		want        int
		out         string
	}{
		{"README", block, exitOK, `key "orders/42"`},
		{"broken", strings.Replace(block, "proof: signed", "proof: forged", 1), 2, ""},
	} {
		path := filepath.Join(t.TempDir(), "fencegate.yaml")
		if err := os.WriteFile(path, []byte(tc.table), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		code := routesCheck(t.Context(), []string{"--config", path, "--request", "PUT https://api.example.com/orders/42"}, &stdout, &stderr)
		if code != tc.want || !strings.Contains(stdout.String(), tc.out) {
			t.Errorf("%s: exit %d, want %d; stdout %q, stderr %q", tc.name, code, tc.want, stdout.String(), stderr.String())
		}
	}
}
