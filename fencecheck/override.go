package fencecheck

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// MethodOverrideHeaders are the request headers frameworks read as the
// method to run instead of the request's own (Rails' Rack::MethodOverride,
// Laravel and Symfony with overrides on, Express's method-override,
// ASP.NET, Google's APIs): a GET passed as a read would act as a DELETE.
// The underscore spellings are distinct names to a proxy but the same
// variable to CGI, WSGI and PHP upstreams (HTTP_X_HTTP_METHOD_OVERRIDE).
var MethodOverrideHeaders = []string{"x-http-method-override", "x-http-method", "x-method-override",
	"x_http_method_override", "x_http_method", "x_method_override"}

// maxOverrides bounds the override values a request is read under (a
// request names its method once; more is either a mistake or an attempt to
// make every edge judge it under thousands of readings). A request with
// more, or with an override header sent twice (the transports hand over
// one copy, an upstream may read the other), is read as every write
// method: it is a write wherever any is, and it selects no entry the
// write methods do not all select.
const maxOverrides = 4

// everyWrite are the readings of a request whose override cannot be read
// one way.
var everyWrite = []string{"POST", "PUT", "PATCH", "DELETE"}

// MethodOverrideParam is the query parameter Laravel and Symfony (for a
// POST) and Express's method-override (when configured so) read as the
// method to run. The form-body spelling is not seen: no edge reads the
// body (docs/edges.md, SECURITY.md).
const MethodOverrideParam = "_method"

// MethodReadings returns every method a request sent as method may run as
// at its upstream, the method as sent first: its upper-case spelling
// (Flask, Django, Symfony and most frameworks upper-case the method before
// dispatching, while Go's and Envoy's routers compare it as sent), and each
// override's in both spellings. Duplicates are dropped. Every edge judges
// a request under all of them: a route table entry selected by one but not
// another is no entry (routes.ErrAmbiguousMethod), and a method that is a
// write under any reading is a write.
func MethodReadings(method string, overrides ...string) []string {
	out := make([]string, 0, 2+2*len(overrides))
	add := func(m string) {
		for _, s := range [2]string{m, strings.ToUpper(m)} {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	add(method)
	for _, o := range overrides {
		add(o)
	}
	return out
}

// Overrides returns the method-override values the request carries: each
// MethodOverrideHeaders value (a comma-joined header map may hold several)
// and each MethodOverrideParam in the query of in.Path, trimmed, in the
// order found. A header is read by its lower-case name; spellings an
// upstream folds into these names (underscores, odd case) are the
// transport's to refuse or pass on as these.
//
// A request whose overrides cannot be read one way (more than maxOverrides
// values, or an override header sent twice) gets everyWrite instead.
func (in Input) Overrides() []string {
	var out []string
	unreadable := false
	add := func(v string) {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if len(out) == maxOverrides {
					unreadable = true
					return
				}
				out = append(out, f)
			}
		}
	}
	if in.Header != nil {
		for _, h := range MethodOverrideHeaders {
			if in.Count != nil && in.Count(h) > 1 {
				unreadable = true
			}
			add(in.Header(h))
		}
	}
	q := in.Path
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	if _, q, ok := strings.Cut(q, "?"); ok {
		for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, _ := strings.Cut(kv, "=")
			if unreadable {
				break
			}
			if overrideParam(k) {
				if d, err := url.QueryUnescape(v); err == nil {
					v = d
				}
				add(v)
			}
		}
	}
	if unreadable {
		return slices.Clone(everyWrite)
	}
	return out
}

// overrideParam reports whether a raw query parameter name reads as
// MethodOverrideParam to some upstream: decoded, and with PHP's folding of
// ' ', '.' and '[' into '_' (parse_str), in any case.
func overrideParam(k string) bool {
	if d, err := url.QueryUnescape(k); err == nil {
		k = d
	}
	if len(k) != len(MethodOverrideParam) {
		return false
	}
	k = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '.', '[':
			return '_'
		}
		return r
	}, k)
	return strings.EqualFold(k, MethodOverrideParam)
}

// Methods returns the request's method readings (MethodReadings over its
// method and Overrides): what every edge judges it under. The one
// normalisation of a request's method, shared by the route table's match
// and the write classification.
func (in Input) Methods() []string {
	if in.readings != nil {
		return in.readings
	}
	return MethodReadings(in.Method, in.Overrides()...)
}

// WithMethods returns in with its method readings (Methods) computed once,
// for a transport that both matches the route table on them and builds
// the check's Request (routes.Table.MatchRequest, Route.Request): both
// then read the one slice, which neither modifies. in's method, path and
// headers must not change afterwards.
func (in Input) WithMethods() Input {
	in.readings = in.Methods()
	return in
}

// ErrTarget marks a request target holding bytes no client sends (see
// CheckTarget). It wraps ErrKeyPath: writes are denied 400 malformed.
var ErrTarget = fmt.Errorf("%w: the request target holds a byte no client sends", ErrKeyPath)

// CheckTarget reports whether an origin-form request target (path and
// query, as the proxy forwards it) holds a byte that no client sends in
// one: a raw '#' (a client keeps the fragment to itself), a space, a
// control character or DEL. Such a target is not read one way: this edge
// would cut the path at '#' where Go's server hands the upstream
// "/orders/42#x", so the write would be checked under another key than the
// upstream writes. Every edge denies such writes 400 malformed. Other
// bytes outside RFC 3986 (raw UTF-8, '"', '{', '|') are read alike by the
// edge and upstreams, and a key template refuses them unencoded. The
// error wraps ErrTarget (and ErrKeyPath).
func CheckTarget(target string) error {
	for i := 0; i < len(target); i++ {
		switch c := target[i]; {
		case c == '#':
			return fmt.Errorf("%w: a raw '#' at byte %d", ErrTarget, i)
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("%w: byte %#02x at %d", ErrTarget, c, i)
		}
	}
	return nil
}
