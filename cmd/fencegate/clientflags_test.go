package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// TestClientFlagsInsecureToken: a token over plain http:// to a remote
// gateway is refused before any connection, unless --insecure-token.
func TestClientFlagsInsecureToken(t *testing.T) {
	t.Setenv("FENCEGATE_TOKEN", "secret")
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--server", "http://127.0.0.1:8080"}, true},
		{[]string{"--server", "http://gateway.internal:8080"}, false},
		{[]string{"--server", "http://gateway.internal:8080", "--insecure-token"}, true},
	} {
		var f clientFlags
		fs := flag.NewFlagSet("lock", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		c, err := f.client()
		if tc.ok != (err == nil) {
			t.Errorf("%v: client() error %v, want ok=%v", tc.args, err, tc.ok)
		}
		if err != nil && (lockstore.CodeOf(err) != lockstore.InvalidArgument || !strings.Contains(err.Error(), "--insecure-token")) {
			t.Errorf("%v: error %v (code %q), want InvalidArgument naming --insecure-token", tc.args, err, lockstore.CodeOf(err))
		}
		_ = c
	}
}
