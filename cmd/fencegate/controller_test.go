package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControllerRefusesToStart: without an API server, or without a
// gateway to observe (Enforced could never be true), the controller
// exits 2 naming what is missing.
func TestControllerRefusesToStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--kube-url"},
		{[]string{"--kube-url", "https://127.0.0.1:1", "--namespace", "x", "--kube-ca-file", ca}, "no certificate"},
		{[]string{"--bogus"}, "bogus"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		if code := runController(context.Background(), tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want %d naming %q", tc.args, code, errb.String(), exitUsage, tc.want)
		}
	}
}
