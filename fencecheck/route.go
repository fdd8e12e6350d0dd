package fencecheck

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencewire"
)

// RouteSpec is a route's options as written: an entry of the route table,
// a proxy route, or the options an ext_authz or forward-auth caller sends.
// Empty fields take the defaults. CompileRoute turns it into a Route.
type RouteSpec struct {
	Name string
	// Key is a literal key or a template over path segments
	// ("orders/{2:int}"); empty: the key comes from KeyHeader.
	Key         string
	KeyHeader   string // default fencewire.HeaderKey
	FenceHeader string // default fencewire.HeaderToken
	Policy      string // ParsePolicy
	Mode        string // ParseMode
	Methods     string // WriteMethods
	Proof       string // ParseProofMode
	Barrier     bool
	MaxWrite    time.Duration // 0: DefaultMaxWrite
	// MaxWait bounds how long a barrier write waits for an older one (0:
	// the check's timeout; the checker refuses it above its cap).
	MaxWait time.Duration
}

// Route is a compiled route: every option parsed once, at load for the
// route table and the proxy, once per distinct options for a caller's
// (authz keeps them in a bounded cache). It is immutable and safe for
// concurrent use. Request is the one place that turns a request into the
// check's Request.
type Route struct {
	Name        string
	Policy      Policy
	Mode        Mode
	Proof       ProofMode
	Methods     MethodSet
	Key         *KeyTemplate // nil: the key comes from KeyHeader
	KeyHeader   string       // lower case; "" when Key is set
	FenceHeader string       // lower case
	Barrier     bool
	MaxWrite    time.Duration // 0: DefaultMaxWrite
	MaxWait     time.Duration
	Spec        RouteSpec // as written, for logs and `fencegate routes check`

	// err: options that do not parse; every write fails closed (503
	// unavailable) with it as the RouteError. keyErr: a key template that
	// does not parse; every write is denied 400 malformed (it names no
	// key), logged at warn.
	err, keyErr error
}

// ErrRouteOption marks a route option that does not parse.
// Its text has no package prefix: the cause it wraps carries one
// ("bad route option: fencecheck: write methods …"), said once.
var ErrRouteOption = errors.New("bad route option")

// CompileRoute parses s once. The error lists every option that does not
// parse (it wraps ErrRouteOption, and ErrBadTemplate for a key template);
// the Route is returned even then, failing closed as the options ask:
// writes of a route whose policy, mode, proof, methods or headers do not
// parse are answered 503 unavailable (every method counts as a write when
// the methods do not parse), and writes under a template that does not
// parse 400 malformed. A configuration refuses such a route at load; a
// caller's options serve it so.
func CompileRoute(s RouteSpec) (*Route, error) {
	rt := &Route{Name: s.Name, Barrier: s.Barrier, MaxWrite: s.MaxWrite, MaxWait: s.MaxWait, Spec: s}
	var errs []error
	var err error
	if rt.Policy, err = ParsePolicy(s.Policy); err != nil {
		errs = append(errs, err)
	}
	if rt.Mode, err = ParseMode(s.Mode); err != nil {
		errs = append(errs, err)
	}
	if rt.Proof, err = ParseProofMode(s.Proof); err != nil {
		errs = append(errs, err)
	}
	if rt.Methods, err = WriteMethods(s.Methods); err != nil {
		rt.Methods, _ = WriteMethods("*") // fail closed: every request is a write
		errs = append(errs, err)
	}
	rt.FenceHeader = fencewire.HeaderToken
	if s.FenceHeader != "" {
		if !ValidHeaderName(s.FenceHeader) {
			errs = append(errs, fmt.Errorf("fencecheck: fence header %q is not a header name", s.FenceHeader))
		}
		rt.FenceHeader = strings.ToLower(s.FenceHeader)
	}
	if s.MaxWrite < 0 || s.MaxWait < 0 {
		errs = append(errs, errors.New("fencecheck: maxWrite and maxWait must not be negative"))
	}
	if s.MaxWait > 0 && !s.Barrier {
		errs = append(errs, errors.New("fencecheck: maxWait is set without the barrier"))
	}
	if len(errs) > 0 {
		rt.err = fmt.Errorf("%w: %w", ErrRouteOption, errors.Join(errs...))
	}
	switch {
	case s.Key != "" && s.KeyHeader != "":
		rt.keyErr = fmt.Errorf("%w: key and keyHeader exclude each other", ErrRouteOption)
	case s.Key != "":
		// Parsing is the whole syntax check: a template's segment numbers
		// are bounded (maxSegmentIndex), so no path needs to be tried.
		if rt.Key, err = ParseKeyTemplate(s.Key); err != nil {
			rt.keyErr = err
		}
	default:
		rt.KeyHeader = fencewire.HeaderKey
		if s.KeyHeader != "" {
			if !ValidHeaderName(s.KeyHeader) {
				rt.keyErr = fmt.Errorf("%w: key header %q is not a header name", ErrRouteOption, s.KeyHeader)
			}
			rt.KeyHeader = strings.ToLower(s.KeyHeader)
		}
	}
	return rt, errors.Join(rt.err, rt.keyErr)
}

// EffectiveMaxWrite is how long a barrier write of this route may take:
// MaxWrite, or DefaultMaxWrite when unset (what admit registers, and what
// a transport times the write by).
func (rt *Route) EffectiveMaxWrite() time.Duration {
	if rt.MaxWrite <= 0 {
		return DefaultMaxWrite
	}
	return rt.MaxWrite
}

// Failed returns a copy of rt whose writes fail closed with err (503
// unavailable), as a route whose options do not parse.
func (rt *Route) Failed(err error) *Route {
	c := *rt
	c.err = errors.Join(rt.err, err)
	return &c
}

// Err is why the route's writes fail closed, or nil.
func (rt *Route) Err() error { return errors.Join(rt.err, rt.keyErr) }

// Input is what a transport extracts from its wire format for one request.
type Input struct {
	Method string
	// MethodUnknown: the request's method is not known (a proxy named the
	// URI but not the method); it is checked as a write whatever the
	// route's methods say.
	MethodUnknown bool
	// Path is the origin-form request target as sent, with its query
	// (read for MethodOverrideParam); the query is cut off here, and a
	// write whose target fails CheckTarget (a raw '#') is denied 400.
	Path string
	// Header returns a header's value by lower-case name (one copy);
	// Count how many copies the request carried.
	Header func(lc string) string
	Count  func(lc string) int
	// CommaJoined: the transport hands over duplicate headers joined with
	// commas (Envoy's header map, nginx's $http_), so a comma in the key
	// header cannot be told from two keys.
	CommaJoined bool
	Peer        string
	Source      string
	// CanFinish: the transport sees the upstream's response and reports
	// completion (ext_proc, the proxy), so the route may use the barrier.
	CanFinish bool
	// Trusted: the caller is the operator's own (the proxy itself, an
	// authenticated or loopback proxy; never decided by which route
	// applies); only then may a route register barrier entries, which
	// outlive the request.
	Trusted bool

	// readings: the method readings, once WithMethods computed them.
	readings []string
}

// Errors a Request carries as its RouteError.
var (
	// ErrBarrierUnsupported: the route asks an edge that cannot see the
	// response (ext_authz, forward-auth) for the write barrier.
	ErrBarrierUnsupported = errors.New("fencecheck: the route asks for the write barrier, which needs an edge that sees the response: " +
		"use ext_proc or `fencegate proxy`, not ext_authz or forward-auth")
	// ErrUntrustedBarrier: a caller not authenticated as the operator's
	// proxy asks for the write barrier.
	ErrUntrustedBarrier = errors.New("fencecheck: the write barrier from a caller not authenticated as the operator's proxy " +
		"(no verified client certificate, not loopback): a barrier entry holds back every newer fence on the key, so only a trusted caller may register one")
)

// Request builds the check's Request for in under the route: the only
// place that reads the fence, lockId, proof and key headers, finds inputs
// sent twice and expands the key template. The Request carries the route
// itself, so the check takes its compiled options as they are (nothing is
// parsed per request). The error, when not nil, is why the key could not
// be known (a template that does not parse wraps ErrBadTemplate, a path
// it cannot read ErrKeyPath); the Request then already asks for 400
// malformed, and the error is for the transport's log.
func (rt *Route) Request(in Input) (Request, error) {
	// A write under any of the method's readings (its case, an override)
	// is a write: the upstream may run any of them.
	write := in.MethodUnknown
	for _, m := range in.Methods() {
		write = write || rt.Methods.IsWrite(m)
	}
	req := rt.request(in, write)
	req.Path = cutQuery(in.Path)
	req.LockID, req.Proof, req.Fence = in.Header(fencewire.HeaderLockID), in.Header(fencewire.HeaderProof), in.Header(rt.FenceHeader)
	// A fence input sent twice is ambiguous: this check reads one copy,
	// the upstream may read the other. Denied malformed.
	if in.Count(rt.FenceHeader) > 1 || in.Count(fencewire.HeaderLockID) > 1 || in.Count(fencewire.HeaderProof) > 1 {
		req.Ambiguous = true
	}
	var keyErr error
	if err := CheckTarget(in.Path); err != nil && req.Write {
		// The upstream may read another path than this check (Go's server
		// keeps "#x" in the path): no key is known for sure.
		req.Ambiguous, keyErr = true, err
	}
	switch {
	case keyErr != nil:
	case rt.keyErr != nil:
		if req.Write {
			req.Ambiguous, keyErr = true, rt.keyErr
		}
	case rt.Key == nil:
		req.Key = in.Header(rt.KeyHeader)
		if in.Count(rt.KeyHeader) > 1 || (in.CommaJoined && strings.Contains(req.Key, ",")) {
			// A key with a comma must come from the route's template.
			req.Ambiguous = true
		}
	case req.Write:
		// A path that is not canonical under the template is denied 400
		// malformed without a backend read (Ambiguous comes before the
		// missing-fence check, so the answer does not depend on whether a
		// fence was sent).
		key, err := rt.Key.Expand(in.Path)
		if err != nil {
			req.Ambiguous, keyErr = true, err
		}
		req.Key = key
	}
	return req, keyErr
}

// WriteRequest builds the check's Request of a write whose key and fence
// the transport read from its own wire format rather than from headers
// (the admission webhook: the object's annotations). The route's policy,
// mode and proof apply, compiled; its methods, headers and key template do
// not (in's Method and Path, taken as given, are audit context only). A
// route whose key options do not parse denies it 400 malformed, as
// Request does.
func (rt *Route) WriteRequest(key, fence string, in Input) Request {
	req := rt.request(in, true)
	req.Key, req.Fence = key, fence
	if rt.keyErr != nil {
		req.Ambiguous = true
	}
	return req
}

// request is what every Request built under rt shares: the route's
// compiled options (and the route itself, which the check takes them
// from), the audit context, and the route's error or the barrier's.
func (rt *Route) request(in Input, write bool) Request {
	req := Request{
		Write:     write,
		Policy:    rt.Policy,
		Mode:      rt.Mode,
		ProofMode: rt.Proof,
		Route:     rt.Name,
		Source:    in.Source,
		Peer:      in.Peer,
		Method:    in.Method,
		Path:      in.Path,
		route:     rt,
	}
	switch {
	case rt.err != nil:
		req.RouteError = rt.err
	case rt.Barrier && !in.CanFinish:
		req.RouteError = ErrBarrierUnsupported
	case rt.Barrier && !in.Trusted:
		// Refused, not ignored: a route that asked for the barrier must
		// not silently run without it.
		req.RouteError = ErrUntrustedBarrier
	default:
		req.Barrier, req.MaxWrite, req.MaxWait = rt.Barrier, rt.MaxWrite, rt.MaxWait
	}
	return req
}

// refusal is the route of a request no one route can read: the defaults
// (holder, enforce, no proof), no barrier. Its requests are all ambiguous.
var refusal = func() *Route {
	rt, err := CompileRoute(RouteSpec{})
	if err != nil {
		panic(err) // the defaults always compile
	}
	return rt
}()

// Refuse builds the check's Request of a request no one route governs: a
// path the route table cannot route (not canonical, a raw '#', a path or
// method that selects another entry when read another way), or one that
// an upstream reading it another way would route elsewhere (the proxy).
// write says whether any route that could govern it counts it as a write
// (the caller knows which); a write is denied 400 malformed with a
// decision id and an audit event, without a store read, whatever any
// route's policy or mode; a read passes. route names the route the request
// would have taken, if any, for the audit. No header is read.
func Refuse(route string, in Input, write bool) Request {
	req := refusal.request(in, write || in.MethodUnknown)
	req.Ambiguous, req.Route, req.Path = true, route, cutQuery(in.Path)
	return req
}

// cutQuery is an origin-form target without its query or fragment: the
// path the audit records.
func cutQuery(target string) string {
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		return target[:i]
	}
	return target
}

// ValidHeaderName reports whether h is an HTTP header field name (an RFC
// 9110 token).
func ValidHeaderName(h string) bool { return isToken(h) }

// SegmentIs reports whether a decoded path segment has a key template's
// segment type: SegmentInt (a canonical decimal id), SegmentUUID (a
// lower-case UUID) or SegmentAny (any non-empty segment).
func SegmentIs(typ, seg string) bool {
	switch typ {
	case SegmentInt:
		return canonicalInt(seg)
	case SegmentUUID:
		return canonicalUUID(seg)
	case SegmentAny:
		return seg != ""
	}
	return false
}
