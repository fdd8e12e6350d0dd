package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/fencewire"
)

// runCheck asks a gateway's forward-auth endpoint whether a write carrying
// --fence for --key would pass the edge: the same decision Envoy and nginx
// get. It prints the decision and exits 0 when allowed, 1 when denied.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "")
	var cf clientFlags
	cf.register(fs)
	key := fs.String("key", "", "lock key (required)")
	fence := fs.String("fence", envOr("FENCE_TOKEN", ""), "presented fence (env FENCE_TOKEN)")
	lockID := fs.String("lock-id", envOr("FENCE_LOCK_ID", ""), "optional ownership proof (env FENCE_LOCK_ID)")
	method := fs.String("method", http.MethodPut, "the write's HTTP method")
	policy := fs.String("policy", "", "holder or latest (default: the gateway's default, holder)")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if *key == "" {
		fmt.Fprintln(stderr, "fencegate check: --key is required")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	// Like Caddy and Traefik, we name the original request in
	// X-Forwarded-*; route options then travel in the query.
	target := strings.TrimRight(cf.server, "/") + "/v1/authz/check"
	if *policy != "" {
		target += "?" + url.Values{fencewire.ExtPolicy: {*policy}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate check:", err)
		return exitUsage
	}
	req.Header.Set("X-Forwarded-Method", *method)
	req.Header.Set("X-Forwarded-Uri", "/")
	req.Header.Set(fencewire.HeaderKey, *key)
	if *fence != "" {
		req.Header.Set(fencewire.HeaderToken, *fence)
	}
	if *lockID != "" {
		req.Header.Set(fencewire.HeaderLockID, *lockID)
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintln(stderr, "fencegate check:", err)
		return exitUsage
	}
	if tok := c.Token(); tok != "" {
		// Forward-auth reads the proxy's credential from
		// Proxy-Authorization (a token with the check operation), never
		// from Authorization, which a proxy forwards from the client.
		req.Header.Set("Proxy-Authorization", "Bearer "+tok)
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate check:", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		fmt.Fprintf(stdout, "{\"allowed\":true,\"fence\":%q,\"decisionId\":%q}\n", resp.Header.Get(fencewire.HeaderVerified), resp.Header.Get(fencewire.HeaderDecisionID))
		return exitOK
	case resp.StatusCode >= 500:
		fmt.Fprintf(stderr, "fencegate check: gateway answered %d (%s): %s\n", resp.StatusCode, resp.Header.Get(fencewire.HeaderReason), strings.TrimSpace(string(body)))
		return exitFailure
	default:
		fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
		return exitNo
	}
}
