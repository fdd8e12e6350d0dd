package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/deploy/mesh"
)

// TestRoutesIstio: with the shipped table and the shipped options the
// command prints exactly deploy/istio/authorizationpolicy.yaml; bad input
// is a usage error or a failure naming the problem, and prints nothing.
func TestRoutesIstio(t *testing.T) {
	table := filepath.Join("..", "..", "deploy", "mesh", "routes.yaml")
	want, err := os.ReadFile(filepath.Join("..", "..", "deploy", "istio", "authorizationpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if mesh.ShippedOptions.Namespace != "shop" || mesh.ShippedOptions.Selector["app"] != "orders" || len(mesh.ShippedOptions.Selector) != 1 {
		t.Fatalf("the shipped options changed (%+v): update this test's flags", mesh.ShippedOptions)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	barrier := write("barrier.yaml", "routes:\n  - name: w\n    match: {path: {value: /w}}\n    key: w\n    barrier: true\n")
	typo := write("typo.yaml", "routes:\n  - name: w\n    mach: {path: {value: /w}}\n")
	empty := write("empty.yaml", "log: {level: info}\n")
	// Two entries no request tells apart: the gateway refuses the table,
	// so no policy may be printed for it.
	overlap := write("overlap.yaml", "routes:\n  - {name: a, match: {path: {value: /w}}, key: w}\n  - {name: b, match: {path: {value: /w}}, key: v}\n")
	// A strict entry on a host beside a host-less policy: off one: behind
	// a sidecar the client picks between them by its Host.
	hostChoice := write("choice.yaml", "routes:\n  - {name: strict, match: {hosts: [api.example.com], path: {value: /orders}}, key: orders, proof: lockId}\n  - {name: open, match: {path: {value: /}}, policy: \"off\"}\n")
	t.Setenv("FENCEGATE_CONFIG", "")

	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     []byte
		stderrHas  string
		stdoutHas  string
		stdoutMiss string
	}{
		{name: "shipped table", args: []string{"--config", table, "--namespace", "shop", "--selector", "app=orders", "--provider", "fencegate"}, code: exitOK, stdout: want},
		{name: "options reach the policy", args: []string{"--config", table, "--namespace", "istio-system", "--selector", "istio=ingressgateway", "--provider", "fence-authz"},
			code: exitOK, stdoutHas: "namespace: istio-system", stdoutMiss: "app: orders"},
		{name: "no selector: every workload", args: []string{"--config", table}, code: exitOK, stdoutHas: "namespace: default", stdoutMiss: "selector:"},
		{name: "no config", args: nil, code: exitUsage, stderrHas: "--config (or FENCEGATE_CONFIG) is required"},
		{name: "wildcard selector", args: []string{"--config", table, "--selector", "app=ord*"}, code: exitUsage, stderrHas: "wildcards"},
		{name: "stray argument", args: []string{"--config", table, "extra"}, code: exitUsage, stderrHas: "unexpected argument"},
		{name: "bad port", args: []string{"--config", table, "--port", "0"}, code: exitUsage, stderrHas: "--port"},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, code: exitFailure, stderrHas: "no such file"},
		{name: "misspelt field", args: []string{"--config", typo}, code: exitFailure, stderrHas: "mach"},
		{name: "barrier entry", args: []string{"--config", barrier}, code: exitFailure, stderrHas: "barrier"},
		{name: "no routes", args: []string{"--config", empty}, code: exitFailure, stderrHas: "empty"},
		{name: "a table the gateway refuses", args: []string{"--config", overlap}, code: exitFailure, stderrHas: "does not load"},
		{name: "entries chosen by Host", args: []string{"--config", hostChoice}, code: exitFailure, stderrHas: `entries "strict" (hosts api.example.com) and "open" (every host)`},
		{name: "entries chosen by Host, at a gateway", args: []string{"--config", hostChoice, "--host-selects-workload"}, code: exitOK, stdoutHas: "notMethods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := routesIstio(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if tc.stdout != nil && !bytes.Equal(stdout.Bytes(), tc.stdout) {
				t.Fatalf("output differs from deploy/istio/authorizationpolicy.yaml:\n%s", stdout.String())
			}
			if tc.code != exitOK && stdout.Len() > 0 {
				t.Fatalf("printed on failure: %s", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Fatalf("stderr %q lacks %q", stderr.String(), tc.stderrHas)
			}
			if !strings.Contains(stdout.String(), tc.stdoutHas) || (tc.stdoutMiss != "" && strings.Contains(stdout.String(), tc.stdoutMiss)) {
				t.Fatalf("stdout: want %q, not %q:\n%s", tc.stdoutHas, tc.stdoutMiss, stdout.String())
			}
		})
	}
}
