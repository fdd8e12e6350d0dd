package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

// ErrAmbiguousPath: the request's path selects another entry when an
// upstream reads it another way (Fold): it has no one route. Writes are
// denied 400 malformed, as for a path that is not canonical.
var ErrAmbiguousPath = errors.New("routes: the path selects another route table entry when read another way (case, trailing dots, double decoding, compatibility forms)")

// ErrAmbiguousMethod: the request's method selects another route table
// entry when read another way (upper-cased, as Flask, Django and Symfony
// dispatch it, or as a method-override header or _method parameter asks;
// fencecheck.MethodReadings): it has no one route. Writes are denied 400
// malformed, as for an ambiguous path.
var ErrAmbiguousMethod = errors.New("routes: the method selects another route table entry when read another way (upper-cased, or as a method-override header or _method parameter names it)")

// pathMatch is an entry's parsed path match.
type pathMatch struct {
	typ   string
	value string // as written
	// p is the decoded path without a trailing "/" ("" for "/") for Exact
	// and PathPrefix; segs the template's segments. folded[i] is p, or
	// the template's literal segments joined by "/", under reading i.
	p      string
	segs   []tplSeg
	folded []string
	// foldedSegs[i] are the template's segments under reading i.
	foldedSegs [][]tplSeg
}

// tplSeg is one segment of a Template path: a literal, "*" (any one
// segment) or a typed placeholder ({int}, {uuid}).
type tplSeg struct {
	lit string
	typ string // fencecheck.SegmentInt, SegmentUUID; "*": SegmentAny with any set
	any bool
}

func (s tplSeg) literal() bool { return !s.any && s.typ == "" }

func parsePathMatch(m config.RoutePath) (pathMatch, error) {
	pm := pathMatch{typ: m.Type, value: m.Value}
	if pm.typ == "" {
		pm.typ = PathPrefix
	}
	if pm.value == "" {
		pm.value = "/"
	}
	if !strings.HasPrefix(pm.value, "/") {
		return pm, fmt.Errorf("match.path.value: %q must start with '/'", m.Value)
	}
	if !config.Printable(pm.value) {
		// No client sends a raw control character in a path (#26), and a
		// generated manifest must not carry one.
		return pm, fmt.Errorf("match.path.value: %q holds a control character, a line separator or invalid UTF-8", m.Value)
	}
	switch pm.typ {
	case PathExact, PathPrefix:
		if err := fencecheck.CheckPath(pm.value); err != nil {
			return pm, fmt.Errorf("match.path.value: %q: %w", m.Value, err)
		}
		d, _ := url.PathUnescape(pm.value) // CheckPath passed: valid escapes, no %2F
		pm.p = trimPath(d)
		for i := 0; i < Readings; i++ {
			pm.folded = append(pm.folded, Fold(i, pm.p))
		}
	case PathTemplate:
		if pm.value != "/" {
			for _, s := range strings.Split(strings.TrimSuffix(pm.value[1:], "/"), "/") {
				switch {
				case s == "*":
					pm.segs = append(pm.segs, tplSeg{any: true})
				case s == "{int}":
					pm.segs = append(pm.segs, tplSeg{typ: fencecheck.SegmentInt})
				case s == "{uuid}":
					pm.segs = append(pm.segs, tplSeg{typ: fencecheck.SegmentUUID})
				case strings.ContainsAny(s, "{}*"):
					return pm, fmt.Errorf("match.path.value: %q: segment %q: a template segment is a literal, *, {int} or {uuid}", m.Value, s)
				default:
					if err := fencecheck.CheckPath("/" + s); err != nil || s == "" {
						return pm, fmt.Errorf("match.path.value: %q: segment %q is not canonical", m.Value, s)
					}
					d, _ := url.PathUnescape(s)
					pm.segs = append(pm.segs, tplSeg{lit: d})
				}
			}
		}
		for i := 0; i < Readings; i++ {
			fs := slices.Clone(pm.segs)
			var lits []string
			for j := range fs {
				if fs[j].literal() {
					fs[j].lit = strings.TrimPrefix(Fold(i, "/"+fs[j].lit), "/")
				}
				lits = append(lits, fs[j].lit)
			}
			pm.foldedSegs = append(pm.foldedSegs, fs)
			pm.folded = append(pm.folded, strings.Join(lits, "/"))
		}
	default:
		return pm, fmt.Errorf("match.path.type: %q must be Exact, PathPrefix or Template", m.Type)
	}
	return pm, nil
}

// trimPath drops one trailing "/" and makes "/" empty: "/orders/" and
// "/orders" are one resource to most upstreams, and a key template reads
// them alike.
func trimPath(p string) string {
	return strings.TrimSuffix(p, "/")
}

// matches reports whether the decoded path p (trimPath'd) under reading i
// (-1: as it is) matches, and its precedence among path matches.
func (pm *pathMatch) matches(i int, p string, segs []string) (bool, int) {
	v, tsegs := pm.p, pm.segs
	if i >= 0 {
		if pm.typ == PathTemplate {
			tsegs = pm.foldedSegs[i]
		} else {
			v = pm.folded[i]
		}
	}
	switch pm.typ {
	case PathExact:
		return p == v, 3 << 20
	case PathPrefix:
		return v == "" || p == v || strings.HasPrefix(p, v+"/"), 1<<20 + len(v)
	}
	if len(segs) != len(tsegs) {
		return false, 0
	}
	lits, typed := 0, 0
	for j, s := range tsegs {
		switch {
		case s.any:
			if segs[j] == "" {
				return false, 0
			}
		case s.typ != "":
			if !fencecheck.SegmentIs(s.typ, segs[j]) {
				return false, 0
			}
			typed++
		default:
			if segs[j] != s.lit {
				return false, 0
			}
			lits++
		}
	}
	return true, 2<<20 + lits<<8 + typed
}

// templateRank is a Template's precedence (as matches returns it).
func (pm *pathMatch) templateRank() int {
	lits, typed := 0, 0
	for _, s := range pm.segs {
		switch {
		case s.literal():
			lits++
		case !s.any:
			typed++
		}
	}
	return 2<<20 + lits<<8 + typed
}

// ErrBadHost: the request's Host is not a host name or an IP address
// (with an optional port) in a table whose entries name hosts. Such a
// Host names no entry's host, so it would reach only the entries that name
// none: a client must not pick those by sending a Host no name is spelt
// as. Writes are denied 400 malformed, as for a path with no one route.
var ErrBadHost = errors.New("routes: the Host is not a host name or IP address with an optional port; where entries name hosts, its writes are refused")

// CanonicalHost is a match host's canonical spelling, the one Match
// compares the request's against (generators emit it: a Gateway API
// hostname must be lower-case ASCII without a trailing dot).
func CanonicalHost(pattern string) (string, error) { return normalizeHostPattern(pattern) }

// normalizeHostPattern checks a match host: a DNS name or "*." and one,
// in its canonical form (canonicalHost): lower-case ASCII, IDNA names in
// their xn-- form, no trailing dot.
func normalizeHostPattern(h string) (string, error) {
	name, wild := strings.CutPrefix(h, "*.")
	n, ok := canonicalHost(name)
	if !ok || strings.ContainsAny(name, ":[]") {
		return "", fmt.Errorf("match.hosts: %q is not a host name or a *.-wildcard (no port, no scheme)", h)
	}
	if wild {
		n = "*." + n
	}
	return n, nil
}

// canonicalHost is the one spelling of a request's Host (or :authority)
// that entries are matched on: the port dropped (it must be a number),
// every trailing dot dropped, an IPv4 or bracketed IPv6 address in its
// canonical form, and a name mapped as IDNA lookup maps it (UTS #46: case
// folded, fullwidth forms and "。" mapped, Unicode labels as xn--) and
// checked (STD3: letters, digits and hyphens). So "API.example.com..",
// "api.example.com:8080", "ａｐｉ.example.com" and an xn-- spelling all
// select the entries of the one name. ok is false for anything else: a
// stray character, an empty label, a port that is not a number, a label
// IDNA refuses, an empty Host.
func canonicalHost(h string) (string, bool) {
	if len(h) > 1024 {
		return "", false
	}
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 || !validPort(h[end+1:]) {
			return "", false
		}
		ip, err := netip.ParseAddr(h[1:end])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", false
		}
		return "[" + ip.String() + "]", true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if !validPort(h[i:]) {
			return "", false
		}
		h = h[:i]
	}
	h = strings.TrimRight(h, ".")
	if h == "" {
		return "", false
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.String(), ip.Is4()
	}
	if !config.Printable(h) {
		return "", false // IDNA would map invalid UTF-8 to U+FFFD, a name no one sent
	}
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", false
	}
	a = strings.TrimRight(strings.ToLower(a), ".")
	if a != h {
		// The canonical form must read as itself, or a table host and a
		// request host could meet in two spellings.
		if b, err := idna.Lookup.ToASCII(a); err != nil || b != a {
			return "", false
		}
	}
	if a == "" || strings.HasPrefix(a, ".") || strings.Contains(a, "..") || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" {
		return "", false
	}
	return a, true
}

// validPort reports whether s is "" (no port) or ":" and a port number
// (or nothing: RFC 3986 allows an empty port).
func validPort(s string) bool {
	if s == "" {
		return true
	}
	d, ok := strings.CutPrefix(s, ":")
	if !ok || len(d) > 5 || strings.Trim(d, "0123456789") != "" {
		return false
	}
	n, _ := strconv.Atoi(d)
	return n <= 65535
}

// hostRank is how specifically e's hosts match host (0: e has no hosts),
// and whether they match at all.
func (e *Entry) hostRank(host string) (bool, int) {
	if len(e.hosts) == 0 {
		return true, 0
	}
	best, ok := 0, false
	for _, h := range e.hosts {
		if suffix, wild := strings.CutPrefix(h, "*"); wild {
			// "*.example.com": one or more labels before .example.com.
			if len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
				ok, best = true, max(best, 1+len(suffix))
			}
		} else if host == h {
			return true, 1 << 30
		}
	}
	return ok, best
}

// methodMatch compares one reading of the request's method with the
// entry's methods (upper case) exactly: "delete" as sent does not match
// DELETE, its upper-case reading does, and Match asks both.
func (e *Entry) methodMatch(method string) (bool, int) {
	if len(e.methods) == 0 {
		return true, 0
	}
	return slices.Contains(e.methods, method), 1
}

// Match returns the entry governing a request: host (the Host or
// :authority, any port), path (the origin-form target as sent; a query is
// ignored) and method, or nil when none matches. Precedence, as the
// Gateway API's: an exact host before a wildcard (the longer first) before
// none; then an Exact path, a Template (more literal, then more typed
// segments first), the longest PathPrefix; then an entry listing methods
// before one that does not. A path that is not canonical
// (fencecheck.CheckPath: its error wraps fencecheck.ErrKeyPath), or that
// another reading of it routes elsewhere (ErrAmbiguousPath), has no entry:
// the caller denies its writes (Refuse). The method is judged under every
// reading fencecheck.MethodReadings gives it; MatchRequest adds the
// request's method overrides.
func (t *Table) Match(host, path, method string) (*Entry, error) {
	return t.MatchMethods(host, path, fencecheck.MethodReadings(method))
}

// MatchRequest is Match for a transport's Input: its path, and every
// reading of its method (fencecheck.Input.Methods: the case, the override
// headers, the _method parameter). A request whose readings select
// different entries has none (ErrAmbiguousMethod). An unknown method
// (Input.MethodUnknown) is read as every method an entry lists, and as
// none: unless they all select one entry, it has none.
func (t *Table) MatchRequest(host string, in fencecheck.Input) (*Entry, error) {
	if t == nil {
		return nil, nil
	}
	ms := in.Methods()
	if t.exactMethods {
		ms = []string{in.Method}
	}
	if in.MethodUnknown {
		// Clipped: ms may be the Input's own readings (WithMethods), which
		// Route.Request reads after.
		ms = append(slices.Clip(ms), t.methods...)
	}
	return t.MatchMethods(host, in.Path, ms)
}

// MatchMethods is Match under the method readings ms (the first one as
// sent; fencecheck.MethodReadings, fencecheck.Input.Methods): the entry
// every reading selects, or ErrAmbiguousMethod when they disagree.
func (t *Table) MatchMethods(host, path string, ms []string) (*Entry, error) {
	if t == nil {
		return nil, nil
	}
	if len(ms) == 0 {
		ms = []string{""}
	}
	if !t.skipTarget {
		if err := fencecheck.CheckTarget(path); err != nil {
			return nil, err
		}
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if err := fencecheck.CheckPath(path); err != nil {
		return nil, err
	}
	decoded, _ := url.PathUnescape(path)
	p := trimPath(decoded)
	if t.hosted {
		h, ok := t.canonHost(host)
		if !ok {
			return nil, ErrBadHost
		}
		host = h
	} else {
		host = "" // no entry names a host: the Host selects nothing
	}
	e := t.best(-1, host, p, ms[0])
	for _, m := range ms[1:] {
		if t.best(-1, host, p, m) != e {
			return nil, fmt.Errorf("%w: %q", ErrAmbiguousMethod, m)
		}
	}
	if (t.foldInvariant && PlainPath(p)) || t.skipFolds {
		return e, nil
	}
	for i := 0; i < Readings; i++ {
		for _, m := range ms {
			if t.best(i, host, Fold(i, p), m) != e {
				return nil, fmt.Errorf("%w: %s", ErrAmbiguousPath, ReadingName(i))
			}
		}
	}
	return e, nil
}

func (t *Table) best(i int, host, p, method string) *Entry {
	var segs []string
	if p != "" && t.templates {
		segs = strings.Split(p[1:], "/")
	}
	var best *Entry
	var bestRank [3]int
	for _, e := range t.entries {
		ok, hr := e.hostRank(host)
		if !ok {
			continue
		}
		ok, mr := e.methodMatch(method)
		if !ok {
			continue
		}
		ok, pr := e.path.matches(i, p, segs)
		if !ok {
			continue
		}
		rank := [3]int{hr, pr, mr}
		if best == nil || slices.Compare(rank[:], bestRank[:]) > 0 {
			best, bestRank = e, rank
		}
	}
	return best
}

// Refuse is the Request of a request whose path Match could not route
// (not canonical, or ambiguous): a write under any entry's methods (or
// the default's) is denied 400 malformed without a store read; a read
// passes.
func (t *Table) Refuse(in fencecheck.Input) fencecheck.Request {
	write := in.MethodUnknown
	for _, m := range in.Methods() {
		write = write || t.noRoute.Methods.IsWrite(m)
		for _, e := range t.entries {
			write = write || e.Route.Methods.IsWrite(m)
		}
	}
	return fencecheck.Refuse("", in, write)
}

// indistinguishable says why no request could tell a from b, or "".
func indistinguishable(a, b *Entry) string {
	if !(len(a.hosts) == 0 && len(b.hosts) == 0) {
		shared := false
		for _, h := range a.hosts {
			shared = shared || slices.Contains(b.hosts, h)
		}
		if !shared {
			return ""
		}
	}
	if len(a.methods) > 0 && len(b.methods) > 0 {
		shared := false
		for _, m := range a.methods {
			shared = shared || slices.Contains(b.methods, m)
		}
		if !shared {
			return ""
		}
	} else if len(a.methods) != len(b.methods) {
		return "" // one lists methods: it wins for those
	}
	if a.path.typ != b.path.typ {
		return ""
	}
	if a.path.typ == PathTemplate {
		if a.path.templateRank() != b.path.templateRank() || len(a.path.segs) != len(b.path.segs) {
			return ""
		}
		if segsOverlap(a.path.segs, b.path.segs) {
			return "overlapping templates of the same precedence"
		}
		for i := 0; i < Readings; i++ {
			if segsOverlap(a.path.foldedSegs[i], b.path.foldedSegs[i]) {
				return "templates that overlap to an upstream that reads paths " + ReadingName(i)
			}
		}
		return ""
	}
	for i := 0; i < Readings; i++ {
		if a.path.folded[i] == b.path.folded[i] {
			if a.path.p == b.path.p {
				return "the same hosts, path and methods"
			}
			return fmt.Sprintf("paths %q and %q are one to an upstream that reads paths %s", a.path.value, b.path.value, ReadingName(i))
		}
	}
	return ""
}

// segsOverlap reports whether some path matches both templates.
func segsOverlap(a, b []tplSeg) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x.literal() && y.literal():
			if x.lit != y.lit {
				return false
			}
		case x.literal():
			if !y.any && !fencecheck.SegmentIs(y.typ, x.lit) {
				return false
			}
		case y.literal():
			if !x.any && !fencecheck.SegmentIs(x.typ, y.lit) {
				return false
			}
		case !x.any && !y.any && x.typ != y.typ:
			return false // an int is never a uuid
		}
	}
	return true
}
