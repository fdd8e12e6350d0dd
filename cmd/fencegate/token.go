package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// runToken prints a fresh bearer token and the config entry holding its
// SHA-256: the gateway stores only the hash, so a leaked config leaks no token.
func runToken(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("token", "")
	name := fs.String("name", "", "token name (appears in logs)")
	prefixes := fs.String("prefixes", "", "comma-separated key prefixes the token may use (empty: all keys)")
	ops := fs.String("operations", "", "comma-separated operations (acquire,release,extend,lookup,status,audit,ui,check; empty: all lock operations)")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if *name == "" {
		fmt.Fprintln(stderr, "fencegate token: --name is required")
		return exitUsage
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		fmt.Fprintln(stderr, "fencegate token:", err)
		return exitFailure
	}
	tok := "fg_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(tok))
	fmt.Fprintf(stdout, "# token (give this to the client; it is not stored anywhere):\n# %s\ntokens:\n  - name: %s\n    sha256: %s\n", tok, *name, hex.EncodeToString(sum[:]))
	if *prefixes != "" {
		fmt.Fprintf(stdout, "    prefixes: [%s]\n", quoteList(*prefixes))
	}
	if *ops != "" {
		fmt.Fprintf(stdout, "    operations: [%s]\n", quoteList(*ops))
	}
	return exitOK
}

func quoteList(csv string) string {
	parts := strings.Split(csv, ",")
	for i, p := range parts {
		parts[i] = fmt.Sprintf("%q", strings.TrimSpace(p))
	}
	return strings.Join(parts, ", ")
}
