package authz

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fencecheck"
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
	// HideCurrentFence leaves the current fence out of denials (the JSON
	// body, and the nginx mapping's body header): a fence is not a secret,
	// but an operator may not want to hand it to whoever sends a write.
	HideCurrentFence bool
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
}

// decider turns a requestView and a route's options into a fencecheck
// Request and decides it. It is shared by the gRPC and HTTP transports so
// that both read the same inputs the same way.
type decider struct {
	checker     *fencecheck.Checker
	log         *slog.Logger
	hideCurrent bool
}

func newDecider(c *fencecheck.Checker, o Options) decider {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return decider{checker: c, log: o.Logger, hideCurrent: o.HideCurrentFence}
}

func (d decider) decide(ctx context.Context, v requestView, ro routeOptions) (fencecheck.Decision, error) {
	path := v.path
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	mode := fencecheck.Mode(ro.mode)
	methods, err := fencecheck.WriteMethods(ro.methods)
	if err != nil {
		// Fail closed, as for any route option that does not parse: every
		// request is a write, and the unparsable mode below makes the
		// checker answer it 503 "unavailable" (whatever the route's mode),
		// with a decision id, metrics and audit like any other.
		d.log.LogAttrs(ctx, slog.LevelWarn, "authz: route's fence_methods is invalid; failing closed",
			slog.String("route", ro.name), slog.Any("error", err))
		methods, _ = fencecheck.WriteMethods("*")
		mode = modeInvalidMethods
	}
	req := fencecheck.Request{
		Write:  v.methodUnknown || methods.IsWrite(v.method),
		Policy: fencecheck.Policy(ro.policy),
		Mode:   mode,
		Route:  ro.name,
		Source: v.source,
		Peer:   v.peer,
		Method: v.method,
		Path:   path,
		LockID: v.header(HeaderLockID),

		ProofMode: fencecheck.ProofMode(ro.proof),
		Proof:     v.header(HeaderProof),
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
	dec, err := d.checker.Check(ctx, req)
	if d.hideCurrent && !dec.Allowed {
		dec.Current = "" // only denials show it; an allowed write's is the presented fence
	}
	return dec, err
}

// modeInvalidMethods is the mode a request carries when its route's
// fence_methods does not parse: no mode parses as it, so fencecheck fails
// the check closed (503 "unavailable") exactly as for an unknown
// fence_mode, and reports the decision's mode as enforce.
const modeInvalidMethods fencecheck.Mode = "(fence_methods invalid)"

// denialBody is the JSON body of a denial (API.md). The key is the raw key
// the request named (its header or its path): the caller already holds it,
// and the body goes back only to that caller. LockIds never appear.
type denialBody struct {
	Error      string `json:"error"`
	Key        string `json:"key"`
	Presented  string `json:"presented"`
	Current    string `json:"current"` // "" with Options.HideCurrentFence, or when the store was not read
	DecisionID string `json:"decisionId"`
}

func denialJSON(dec fencecheck.Decision) []byte {
	b, _ := json.Marshal(denialBody{ // a struct of strings always marshals
		Error:      string(dec.Reason),
		Key:        dec.Key,
		Presented:  dec.Presented,
		Current:    dec.Current,
		DecisionID: dec.DecisionID,
	})
	return b
}

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
