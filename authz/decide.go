package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/lockstore"
)

// Sources name the transport in audit events.
const (
	SourceGRPC = "authz-grpc"
	SourceHTTP = "authz-http"
)

// Options configure the transports. The zero value is usable.
type Options struct {
	// Logger logs misconfigured routes and failed checks, never a raw key,
	// fence or lockId above debug; nil is slog.Default().
	Logger *slog.Logger
	// Authenticate, when set, guards forward-auth: every request must
	// carry a credential in Proxy-Authorization (HeaderCredential), which
	// Authenticate turns into the keys the caller may check, or into
	// ErrUnauthenticated (401) or ErrForbidden (403). Such a caller is
	// trusted. nil: forward-auth answers whoever reaches it (auth off).
	Authenticate func(credential string) (KeyScope, error)
	// TrustLoopback trusts callers connecting from a loopback address (the
	// same host or pod) as the operator's proxy, as the lock API trusts
	// them without tokens. Off, only a gRPC caller with a verified client
	// certificate, or a forward-auth caller with a credential, is trusted.
	// Only a trusted caller's route may ask for the write barrier.
	TrustLoopback bool
}

// requestView is what both transports extract from their wire format.
type requestView struct {
	method string
	// methodUnknown: the proxy named the original URI but not its method;
	// the request is checked as a write whatever the route's methods say.
	methodUnknown bool
	path          string                 // may carry a query string; it is cut off here
	header        func(lc string) string // by lowercase name: the value (one copy)
	count         func(lc string) int    // by lowercase name: how many copies the request carried
	peer          string
	source        string
	// canFinish: the transport sees the upstream's response and reports
	// completion (ext_proc), so a route may ask for the write barrier.
	canFinish bool
	// caller is who asks: whether it is trusted, which keys it may check.
	caller caller
}

// decider turns a requestView and a route's options into a fencecheck
// Request and decides it. It is shared by the gRPC and HTTP transports so
// that both read the same inputs the same way.
type decider struct {
	checker       *fencecheck.Checker
	log           *slog.Logger
	authenticate  func(string) (KeyScope, error)
	trustLoopback bool
}

func newDecider(c *fencecheck.Checker, o Options) decider {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return decider{checker: c, log: o.Logger, authenticate: o.Authenticate, trustLoopback: o.TrustLoopback}
}

func (d decider) decide(ctx context.Context, v requestView, ro routeOptions) (fencecheck.Decision, error) {
	path := v.path
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	methods, methodsErr := fencecheck.WriteMethods(ro.methods)
	if methodsErr != nil {
		// Fail closed, as for any route option that does not parse: every
		// request is a write, and RouteError below makes the checker answer
		// it 503 "unavailable" (whatever the route's mode), with a decision
		// id, metrics and audit like any other.
		methods, _ = fencecheck.WriteMethods("*")
	}
	req := fencecheck.Request{
		Write:  v.methodUnknown || methods.IsWrite(v.method),
		Policy: fencecheck.Policy(ro.policy),
		Mode:   fencecheck.Mode(ro.mode),
		Route:  ro.name,
		Source: v.source,
		Peer:   v.peer,
		Method: v.method,
		Path:   path,
		LockID: v.header(HeaderLockID),

		ProofMode: fencecheck.ProofMode(ro.proof),
		Proof:     v.header(HeaderProof),
	}
	barrier, maxWrite, berr := parseBarrier(ro.barrier, ro.maxWrite)
	maxWait, werr := parseMaxWait(ro.maxWait, barrier)
	if berr == nil {
		berr = werr
	}
	switch {
	case ro.err != nil:
		req.RouteError = ro.err
	case methodsErr != nil:
		req.RouteError = fmt.Errorf("%s: %w", ExtMethods, methodsErr)
	case berr != nil:
		req.RouteError = berr
	case barrier && !v.canFinish:
		req.RouteError = errBarrierUnsupported
	case barrier && !v.caller.trusted:
		// A barrier entry outlives the request and holds back every newer
		// fence on the key for up to maxWrite: only the operator's proxy
		// may register one. Refused, not ignored: a route that asked for
		// the barrier must not silently run without it.
		req.RouteError = errUntrustedBarrier // logged by the checker, with the route, at warn
	default:
		req.Barrier, req.MaxWrite, req.MaxWait = barrier, maxWrite, maxWait
	}
	fenceHeader := HeaderToken
	if ro.header != "" {
		fenceHeader = strings.ToLower(ro.header)
	}
	req.Fence = v.header(fenceHeader)

	// A fence input sent twice is ambiguous: this check reads one copy, the
	// upstream may read the other. Denied malformed (fencecheck).
	inputs := []string{fenceHeader, HeaderLockID, HeaderProof}
	if ro.key == "" {
		req.Key = v.header(HeaderKey)
		inputs = append(inputs, HeaderKey)
		// Proxies join duplicate headers with commas (Envoy's headers map,
		// nginx's $http_ variables), so a comma in a key header cannot be
		// told from two keys: a key with a comma must come from fence_key.
		req.Ambiguous = strings.Contains(req.Key, ",")
	}
	for _, h := range inputs {
		if v.count(h) > 1 {
			req.Ambiguous = true
		}
	}
	if req.Ambiguous && req.Write {
		d.log.LogAttrs(ctx, slog.LevelDebug, "authz: a fence input header was sent more than once", slog.String("route", ro.name))
	}

	if ro.key != "" && req.Write {
		// A template that does not parse, or a path that is not canonical
		// under it, is denied 400 "malformed" without a backend read
		// (Ambiguous comes before the missing-fence check, so the answer
		// does not depend on whether a fence was sent).
		key, err := fencecheck.ExpandKey(ro.key, v.path)
		if err != nil {
			level := slog.LevelDebug
			if errors.Is(err, fencecheck.ErrBadTemplate) {
				level = slog.LevelWarn // the route's configuration, not the client
			}
			d.log.LogAttrs(ctx, level, "authz: fence_key did not expand", slog.String("route", ro.name), slog.Any("error", err))
			req.Ambiguous = true
		}
		req.Key = key
	}
	if req.Write && v.caller.scope != nil {
		// A key the backend would refuse is the checker's to answer
		// (malformed); a valid key outside the credential's prefixes is
		// refused here, before any store read or audit event.
		if nk, err := lockstore.NormalizeKey(req.Key); err == nil && !v.caller.scope(nk) {
			return fencecheck.Decision{}, errKeyOutOfScope
		}
	}
	return d.checker.Check(ctx, req)
}

func denialJSON(dec fencecheck.Decision) []byte { return fencecheck.DenialJSON(dec) }

// asciiJSON escapes every non-ASCII rune of a JSON document as \uXXXX, so
// that it can travel in an HTTP header (the nginx mapping).
func asciiJSON(b []byte) string {
	var sb strings.Builder
	for _, r := range string(b) {
		switch {
		case r < utf8.RuneSelf:
			sb.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			writeU(&sb, r1)
			writeU(&sb, r2)
		default:
			writeU(&sb, r)
		}
	}
	return sb.String()
}

func writeU(sb *strings.Builder, r rune) {
	const hex = "0123456789abcdef"
	sb.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		sb.WriteByte(hex[(r>>shift)&0xF])
	}
}
