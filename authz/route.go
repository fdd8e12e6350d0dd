package authz

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Default request headers (lowercase, as Envoy hands them over).
const (
	HeaderKey      = "x-fence-key"      // the lock key, unless the route names it
	HeaderToken    = "x-fence-token"    // the presented fence, unless the route names another header
	HeaderLockID   = "x-fence-lock-id"  // the optional ownership proof; never reaches upstream
	HeaderVerified = "x-fence-verified" // set towards upstream: the fence that was verified

	HeaderReason     = "x-fence-reason"      // denials: the reason
	HeaderDecisionID = "x-fence-decision-id" // every checked write: the decision id
	HeaderWouldDeny  = "x-fence-would-deny"  // towards upstream in dry-run: the reason enforce would have denied
)

// Route option names: Envoy context_extensions keys, and the query
// parameters of the HTTP forward-auth endpoint.
const (
	ExtKey     = "fence_key"     // a literal key, or a template over path segments: "orders/{2}"
	ExtHeader  = "fence_header"  // the header carrying the fence (default x-fence-token)
	ExtPolicy  = "fence_policy"  // holder | latest | off
	ExtMode    = "fence_mode"    // enforce | dry-run | warn
	ExtMethods = "fence_methods" // write methods: "POST,PUT" or "*"; default everything but GET, HEAD, OPTIONS
	ExtRoute   = "fence_route"   // the route's name, for audit and logs
)

// routeOptions are a route's settings, from context_extensions (gRPC) or
// headers/query (HTTP). Empty fields take the defaults.
type routeOptions struct {
	key, header, policy, mode, methods, name string
}

func optionsFromMap(m map[string]string) routeOptions {
	return routeOptions{
		key:     m[ExtKey],
		header:  m[ExtHeader],
		policy:  m[ExtPolicy],
		mode:    m[ExtMode],
		methods: m[ExtMethods],
		name:    m[ExtRoute],
	}
}

// errBadTemplate marks a key template the route's configuration got wrong
// (as opposed to a request path that lacks a segment).
var errBadTemplate = errors.New("authz: bad fence_key template")

// ExpandKey evaluates a route's fence_key against a request path. A key
// without braces is a literal. "{N}" (N ≥ 1) is replaced by the Nth segment
// of the path, counting from 1 after the leading "/", percent-decoded; the
// query string is ignored. For "/orders/42?x=1", "orders/{2}" → "orders/42".
//
// Segments are decoded so that "/orders/%34%32" and "/orders/42" name the
// same lock: the upstream will treat them as the same resource. A missing
// or empty segment is an error (the transports answer 400 malformed); so is
// a template that does not parse (wrapping errBadTemplate).
func ExpandKey(template, path string) (string, error) {
	if !strings.ContainsAny(template, "{}") {
		return template, nil
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var b strings.Builder
	for rest := template; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if close := strings.IndexByte(rest, '}'); close >= 0 && (open < 0 || close < open) {
			return "", fmt.Errorf("%w: unmatched '}' in %q", errBadTemplate, template)
		}
		if open < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:open])
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", fmt.Errorf("%w: unclosed '{' in %q", errBadTemplate, template)
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil || n < 1 || rest[0] == '+' || rest[0] == '-' {
			return "", fmt.Errorf("%w: %q is not a segment number (1, 2, …) in %q", errBadTemplate, rest[:end], template)
		}
		rest = rest[end+1:]
		if n > len(segs) || segs[n-1] == "" {
			return "", fmt.Errorf("authz: path has no segment %d for key template %q", n, template)
		}
		seg, err := url.PathUnescape(segs[n-1])
		if err != nil {
			return "", fmt.Errorf("authz: segment %d of the path: %w", n, err)
		}
		b.WriteString(seg)
	}
	return b.String(), nil
}
