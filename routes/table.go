// Package routes is the route table every edge shares (#20): ext_authz,
// ext_proc, forward-auth and the fencing reverse proxy. Compile turns the
// configuration's entries into a Table once (each entry's options compiled
// into a fencecheck.Route, its match parsed, the entries checked against
// each other); Match finds the entry governing a request by host, path and
// method, with the Gateway API's precedence; Named finds the entry a
// trusted caller names. A Table is immutable; Holder swaps it on reload.
//
// Imports: fencecheck and config (plain data) only; the transports import
// it.
package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

// Path match types (config.RoutePath.Type).
const (
	PathExact    = "Exact"
	PathPrefix   = "PathPrefix"
	PathTemplate = "Template"
)

// Unmatched says what a write that matches no entry gets.
type Unmatched string

// Unmatched settings (check.unmatchedWrites).
const (
	// UnmatchedDeny (the default): the write fails closed, 503
	// unavailable; reads pass.
	UnmatchedDeny Unmatched = "deny"
	// UnmatchedDefaults: the write is checked as without a table (the
	// caller's options, else the defaults).
	UnmatchedDefaults Unmatched = "defaults"
)

// ParseUnmatched parses check.unmatchedWrites; "" is UnmatchedDeny.
func ParseUnmatched(s string) (Unmatched, error) {
	switch Unmatched(s) {
	case "", UnmatchedDeny:
		return UnmatchedDeny, nil
	case UnmatchedDefaults:
		return UnmatchedDefaults, nil
	}
	return "", fmt.Errorf("routes: unmatched writes %q: want deny or defaults", s)
}

// ErrNoRoute is the RouteError of a write no entry governs (UnmatchedDeny).
var ErrNoRoute = errors.New("routes: no route table entry matches this request; writes fail closed (check.unmatchedWrites: deny)")

// Entry is one compiled entry of the table.
type Entry struct {
	Name string
	// Route is the entry's compiled options.
	Route *fencecheck.Route
	// Upstream is where the fencing reverse proxy sends the entry's
	// requests; nil: the entry is only checked (authz edges).
	Upstream *url.URL
	// Config is the entry as written.
	Config config.Route

	hosts   []string // lower case; "*.example.com" wildcards; empty: every host
	path    pathMatch
	methods []string // request methods, upper case; empty: every method
}

// Table is a compiled route table. It is immutable and safe for
// concurrent use. A nil *Table is the empty table of a gateway without
// one.
type Table struct {
	entries   []*Entry
	byName    map[string]*Entry
	hash      string
	unmatched Unmatched
	noRoute   *fencecheck.Route
	// foldInvariant: no reading changes any entry's path match, so a
	// plain path needs no second match; templates: some entry is one.
	foldInvariant, templates bool
	skipFolds                bool // Options'
	// methods are every method an entry lists (an unknown method may be
	// any of them).
	methods                  []string
	exactMethods, skipTarget bool // Options'
	// hosted: some entry names hosts, so a request's Host must be one
	// (canonHost: canonicalHost, but for the tests' broken variants).
	hosted    bool
	canonHost func(string) (string, bool)
	proxyOnly bool // Options'
}

// Options are the table's gateway-wide settings.
type Options struct {
	Unmatched Unmatched
	// ProxyOnly: the entries are proxy.routes alone (no routes:, no
	// routesFile). The table routes the fencing reverse proxy; the authz
	// edges take their callers' options, as before the table (#27 kept
	// that: a gateway with proxy.routes and inline authz options behaves
	// as it did).
	ProxyOnly bool

	// skipFolds matches on the exact reading alone, skipOverlap keeps
	// entries no request can tell apart, allPairs compares every pair of
	// entries (the O(n²) check before issue #26 item 8): only so the tests
	// can show what each prevents; production code never sets them.
	skipFolds, skipOverlap, allPairs bool
	// comparisons, when set, counts the pairs the overlap check compares.
	comparisons *int
	// exactMethods matches the method as sent alone (no upper-case
	// reading, no override), skipTarget lets a raw '#' through: the
	// broken variants the tests show caught (#26 items 2, 3).
	exactMethods, skipTarget bool
	// hostCanon replaces canonicalHost (tests only: the broken variants).
	hostCanon func(string) (string, bool)
}

// Compile compiles entries into a Table, or reports every problem at once
// (one line per problem, naming the entry): options that do not compile,
// matches that do not parse, a name used twice, and two entries no
// request could tell apart (the same hosts, the same path match and
// overlapping methods).
func Compile(entries []config.Route, o Options) (*Table, error) {
	if o.Unmatched == "" {
		o.Unmatched = UnmatchedDeny
	}
	t := &Table{byName: make(map[string]*Entry, len(entries)), unmatched: o.Unmatched, skipFolds: o.skipFolds,
		exactMethods: o.exactMethods, skipTarget: o.skipTarget, canonHost: o.hostCanon, proxyOnly: o.ProxyOnly}
	if t.canonHost == nil {
		t.canonHost = canonicalHost
	}
	var errs []error
	for i, c := range entries {
		where := fmt.Sprintf("routes[%d]", i)
		if c.Name != "" {
			where += fmt.Sprintf(" (%s)", c.Name)
		}
		e, err := compileEntry(c)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				errs = append(errs, fmt.Errorf("%s: %s", where, line))
			}
			continue
		}
		if t.byName[e.Name] != nil {
			errs = append(errs, fmt.Errorf("%s: name %q is used by another entry", where, e.Name))
			continue
		}
		t.byName[e.Name] = e
		t.entries = append(t.entries, e)
	}
	for _, p := range overlapCandidates(t.entries, o.allPairs) {
		a, b := t.entries[p[0]], t.entries[p[1]]
		if o.comparisons != nil {
			*o.comparisons++
		}
		if why := indistinguishable(a, b); why != "" && !o.skipOverlap {
			errs = append(errs, fmt.Errorf("routes %q and %q: no request can tell them apart (%s)", a.Name, b.Name, why))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	t.foldInvariant = true
	for _, e := range t.entries {
		for _, m := range e.methods {
			if !slices.Contains(t.methods, m) {
				t.methods = append(t.methods, m)
			}
		}
		t.hosted = t.hosted || len(e.hosts) > 0
		t.templates = t.templates || e.path.typ == PathTemplate
		for i := 0; i < Readings; i++ {
			if e.path.typ == PathTemplate {
				t.foldInvariant = t.foldInvariant && slices.Equal(e.path.foldedSegs[i], e.path.segs)
			} else {
				t.foldInvariant = t.foldInvariant && e.path.folded[i] == e.path.p
			}
		}
	}
	nr, _ := fencecheck.CompileRoute(fencecheck.RouteSpec{})
	t.noRoute = nr.Failed(ErrNoRoute)
	sum := sha256.New()
	_ = json.NewEncoder(sum).Encode(struct {
		R []config.Route
		U Unmatched
		P bool `json:",omitempty"`
	}{entries, o.Unmatched, o.ProxyOnly})
	t.hash = hex.EncodeToString(sum.Sum(nil))[:16]
	return t, nil
}

func compileEntry(c config.Route) (*Entry, error) {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name: required"))
	} else if !config.Printable(c.Name) {
		errs = append(errs, fmt.Errorf("name: %q holds a control character, a line separator or invalid UTF-8", c.Name))
	}
	rt, err := fencecheck.CompileRoute(fencecheck.RouteSpec{
		Name: c.Name, Key: c.Key, KeyHeader: c.KeyHeader, FenceHeader: c.FenceHeader, Policy: c.Policy, Mode: c.Mode,
		Methods: c.Methods, Proof: c.Proof, Barrier: c.Barrier, MaxWrite: c.MaxWrite.Std(), MaxWait: c.EffectiveMaxWait(),
	})
	if err != nil {
		errs = append(errs, err)
	}
	e := &Entry{Name: c.Name, Route: rt, Config: c}
	for _, h := range c.Match.Hosts {
		n, err := normalizeHostPattern(h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(e.hosts, n) {
			e.hosts = append(e.hosts, n)
		}
	}
	slices.Sort(e.hosts)
	if e.path, err = parsePathMatch(c.Match.Path); err != nil {
		errs = append(errs, err)
	}
	for _, m := range c.Match.Methods {
		if !fencecheck.ValidHeaderName(m) { // a method is a token too
			errs = append(errs, fmt.Errorf("match.methods: %q is not an HTTP method", m))
			continue
		}
		// Upper case: a request's method is matched as sent and
		// upper-cased (MatchRequest), so "delete" here means DELETE, and
		// an entry listing both spellings lists one method.
		if m = strings.ToUpper(m); !slices.Contains(e.methods, m) {
			e.methods = append(e.methods, m)
		}
	}
	if c.Upstream != "" {
		u, err := url.Parse(c.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("upstream: %q must be an http:// or https:// URL with a host", c.Upstream))
		}
		e.Upstream = u
	}
	return e, errors.Join(errs...)
}

// Len is the number of entries.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Hash identifies the table's content (the entries as written and the
// unmatched setting): 16 hex digits, logged at every load and reload.
func (t *Table) Hash() string {
	if t == nil {
		return ""
	}
	return t.hash
}

// ProxyOnly reports whether the table is proxy.routes alone
// (Options.ProxyOnly): it routes the fencing reverse proxy, and the authz
// edges serve as without a table. A nil table is not.
func (t *Table) ProxyOnly() bool { return t != nil && t.proxyOnly }

// Unmatched is the table's unmatched-writes setting.
func (t *Table) Unmatched() Unmatched { return t.unmatched }

// Entries returns the entries in the file's order.
func (t *Table) Entries() []*Entry {
	if t == nil {
		return nil
	}
	return slices.Clone(t.entries)
}

// Named returns the entry called name, or nil.
func (t *Table) Named(name string) *Entry {
	if t == nil {
		return nil
	}
	return t.byName[name]
}

// NoRoute is the route of a request no entry matches under UnmatchedDeny:
// the default write methods, every write failing closed with ErrNoRoute.
func (t *Table) NoRoute() *fencecheck.Route { return t.noRoute }

// Holder holds the table the edges serve; a reload swaps it whole.
type Holder struct{ p atomic.Pointer[Table] }

// NewHolder returns a Holder serving t.
func NewHolder(t *Table) *Holder {
	h := &Holder{}
	h.p.Store(t)
	return h
}

// Load returns the table being served (nil: none configured). A nil
// Holder holds none.
func (h *Holder) Load() *Table {
	if h == nil {
		return nil
	}
	return h.p.Load()
}

// Store swaps in t.
func (h *Holder) Store(t *Table) { h.p.Store(t) }

// overlapCandidates are the pairs of entries (indexes, i < j, in order)
// that indistinguishable must compare: only those whose path matches could
// coincide, found by grouping (issue #26 item 8: comparing every pair made
// a table of 8,000 entries take 5.7 s to load, and a reload with it).
// Exact and PathPrefix entries meet only where their paths are one under
// some reading, so they are grouped by (type, reading, folded path).
// Templates meet only at the same precedence and length, and then only
// when their first segments can (a literal meets the same literal, or a
// placeholder), under the raw segments or some reading: they are grouped
// by (precedence, length, reading, first literal), a template whose first
// segment is a placeholder joining every group of its precedence and
// length. So a table of distinct paths costs O(n log n) (the final sort);
// what stays quadratic is only entries that share one path (the same path
// for many hosts or methods, or many templates opening with a
// placeholder at one precedence), which indistinguishable must tell apart
// pair by pair. Hosts and methods are deliberately not grouped on: the
// check's rules for them stay in indistinguishable alone.
func overlapCandidates(entries []*Entry, all bool) [][2]int {
	var pairs [][2]int
	if all {
		for i := range entries {
			for j := i + 1; j < len(entries); j++ {
				pairs = append(pairs, [2]int{i, j})
			}
		}
		return pairs
	}
	type tplGroup struct {
		lits map[string][]int
		wild []int
	}
	flat := map[string][]int{}
	tpls := map[string]*tplGroup{}
	for i, e := range entries {
		pm := &e.path
		if pm.typ != PathTemplate {
			for r, f := range pm.folded {
				k := fmt.Sprintf("%s\x00%d\x00%s", pm.typ, r, f)
				flat[k] = append(flat[k], i)
			}
			continue
		}
		readings := append([][]tplSeg{pm.segs}, pm.foldedSegs...)
		for r, segs := range readings {
			k := fmt.Sprintf("%d\x00%d\x00%d", pm.templateRank(), len(segs), r)
			g := tpls[k]
			if g == nil {
				g = &tplGroup{lits: map[string][]int{}}
				tpls[k] = g
			}
			if len(segs) == 0 || !segs[0].literal() {
				g.wild = append(g.wild, i)
			} else {
				g.lits[segs[0].lit] = append(g.lits[segs[0].lit], i)
			}
		}
	}
	seen := map[[2]int]bool{}
	add := func(i, j int) {
		if i == j {
			return
		}
		p := [2]int{min(i, j), max(i, j)}
		if !seen[p] {
			seen[p] = true
			pairs = append(pairs, p)
		}
	}
	within := func(ix []int) {
		for x := range ix {
			for y := x + 1; y < len(ix); y++ {
				add(ix[x], ix[y])
			}
		}
	}
	for _, ix := range flat {
		within(ix)
	}
	for _, g := range tpls {
		within(g.wild)
		for _, ix := range g.lits {
			within(ix)
			for _, w := range g.wild {
				for _, i := range ix {
					add(w, i)
				}
			}
		}
	}
	// In the file's order, as every pair was reported before.
	slices.SortFunc(pairs, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	return pairs
}
