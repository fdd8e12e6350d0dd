package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/routes"
)

// runRoutes is `fencegate routes <subcommand>`.
func runRoutes(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: fencegate routes <subcommand> [flags]\n\nsubcommands:\n  check   validate the route table and show which entry a sample request matches\n  istio   print the Istio AuthorizationPolicy (CUSTOM) and DestinationRule generated from the table\n\nRun 'fencegate routes <subcommand> -h' for its flags."
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return exitOK
	}
	switch args[0] {
	case "check":
		return routesCheck(ctx, args[1:], stdout, stderr)
	case "istio":
		return routesIstio(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "fencegate routes: unknown subcommand %q\n\n%s\n", args[0], usage)
	return exitUsage
}

// requestFlags collects repeated --request values.
type requestFlags []string

func (r *requestFlags) String() string { return strings.Join(*r, "; ") }
func (r *requestFlags) Set(v string) error {
	// A sample that is not "METHOD URL" is a bad flag (exit 2), not an
	// answer about the table (exit 1): nothing was checked.
	method, raw, found := strings.Cut(strings.TrimSpace(v), " ")
	u, err := url.Parse(strings.TrimSpace(raw))
	if !found || method == "" || err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not \"METHOD URL\" with an absolute http(s) URL (\"PUT https://api.example.com/orders/42\")", v)
	}
	*r = append(*r, v)
	return nil
}

// headerFlags collects repeated --header "name: value" values.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }
func (h headerFlags) Set(v string) error {
	name, val, ok := strings.Cut(v, ":")
	if !ok || !fencecheck.ValidHeaderName(strings.TrimSpace(name)) {
		return fmt.Errorf("%q is not \"name: value\"", v)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(val))
	return nil
}

// routesCheck is `fencegate routes check`: it validates the config file's
// route table as serve would load it (or reload it), prints its entries,
// and for each --request the entry that governs it and the key it yields.
// Exit 0: valid, and every --request has an entry that would check it; 2:
// the table (or a flag, a --request that is not "METHOD URL" included)
// does not load; 1: a --request no entry matches, or one refused 400
// malformed (a path that cannot be routed, or that names no key).
func routesCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("routes check", "usage: fencegate routes check --config FILE [--request \"PUT https://api.example.com/orders/42\"]...\n\nValidates the route table as `fencegate serve` loads it, lists its entries, and\nshows which entry governs each sample request and the lock key it yields.")
	configPath := fs.String("config", "", "YAML config file with routes: (env FENCEGATE_CONFIG)")
	var reqs requestFlags
	hdrs := headerFlags{}
	fs.Var(&reqs, "request", `a sample request, "METHOD URL" ("PUT https://api.example.com/orders/42"); repeatable`)
	fs.Var(hdrs, "header", `a header of every sample request, "name: value" (x-fence-key: orders/7); repeatable`)
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate routes check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	path := *configPath
	if path == "" {
		path = os.Getenv("FENCEGATE_CONFIG")
	}
	if path == "" {
		fmt.Fprintln(stderr, "fencegate routes check: --config is required")
		return exitUsage
	}
	f, err := routereload.ReadConfig(path)
	c := f.Config
	if err != nil {
		fmt.Fprintf(stderr, "fencegate routes check: %v\n", err)
		return exitUsage
	}
	var problems []string
	if err := c.ValidateRoutes(); err != nil {
		problems = append(problems, err.(config.Problems)...)
	}
	// What serve would refuse at start besides the table: a table that
	// requires signed proofs in a file with no key to verify them.
	problems = append(problems, c.ProofKeyProblems()...)
	var t *routes.Table
	if len(problems) == 0 {
		if t, err = routereload.Compile(&c); err != nil {
			problems = append(problems, strings.Split(err.Error(), "\n")...)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "fencegate routes check: the route table does not load:\n  - %s\n", strings.Join(problems, "\n  - "))
		return exitUsage
	}
	if t == nil {
		fmt.Fprintln(stdout, "no route table (routes: is empty): every request takes its caller's options")
		return exitOK
	}
	fmt.Fprintf(stdout, "route table: %d entries, hash %s, unmatched writes: %s\n", t.Len(), t.Hash(), t.Unmatched())
	if t.ProxyOnly() {
		fmt.Fprintln(stdout, "proxy.routes alone: the fencing reverse proxy's table; the authz edges take their callers' options")
	}
	for _, e := range t.Entries() {
		fmt.Fprintf(stdout, "  %s\n", describeEntry(e))
	}
	for _, w := range routes.HostChoices(t) {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	code := exitOK
	for _, r := range reqs {
		line, ok := explainRequest(t, r, http.Header(hdrs))
		fmt.Fprintln(stdout, line)
		if !ok {
			code = exitNo
		}
	}
	return code
}

// describeEntry is one line about an entry: its match and options.
func describeEntry(e *routes.Entry) string {
	m := e.Config.Match
	hosts := "any host"
	if len(m.Hosts) > 0 {
		hosts = strings.Join(m.Hosts, ",")
	}
	typ := m.Path.Type
	if typ == "" {
		typ = routes.PathPrefix
	}
	val := m.Path.Value
	if val == "" {
		val = "/"
	}
	methods := "any method"
	if len(m.Methods) > 0 {
		methods = strings.Join(m.Methods, ",")
	}
	rt := e.Route
	key := "from header " + rt.KeyHeader
	if rt.Key != nil {
		key = fmt.Sprintf("%q", rt.Key.String())
	}
	s := fmt.Sprintf("%s: %s %s %q, %s; key %s, policy %s, mode %s, proof %s, writes %s", e.Name, hosts, typ, val, methods,
		key, rt.Policy, rt.Mode, rt.Proof, writeMethods(rt.Methods))
	if rt.Barrier {
		s += ", barrier"
	}
	if e.Upstream != nil {
		s += ", upstream " + e.Upstream.Redacted()
	}
	return s
}

func writeMethods(ms fencecheck.MethodSet) string {
	if s := ms.String(); s != "" {
		return s
	}
	return fencecheck.DefaultWriteMethodsSpec
}

// explainRequest says which entry governs "METHOD URL" and the key it
// yields; ok is false when no entry does or the request would be refused
// 400 malformed (its path names no key under the entry's template).
func explainRequest(t *routes.Table, spec string, h http.Header) (string, bool) {
	method, raw, found := strings.Cut(strings.TrimSpace(spec), " ")
	u, err := url.Parse(strings.TrimSpace(raw))
	if !found || err != nil || u.Host == "" {
		return fmt.Sprintf("%s: not \"METHOD URL\" (PUT https://api.example.com/orders/42)", spec), false
	}
	path := u.EscapedPath()
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	if path == "" {
		path = "/"
	}
	head := fmt.Sprintf("%s %s → ", method, u.String())
	// One Input for the match and the check, as the edges build it.
	in := fencecheck.Input{Method: method, Path: path, Header: h.Get,
		Count: func(lc string) int { return len(h.Values(lc)) }, CanFinish: true, Trusted: true}.WithMethods()
	e, err := t.MatchRequest(u.Host, in)
	if err != nil {
		return head + "refused: writes are denied 400 malformed (" + err.Error() + ")", false
	}
	if e == nil {
		if t.Unmatched() == routes.UnmatchedDefaults {
			return head + "no entry: checked with the caller's options (check.unmatchedWrites: defaults)", false
		}
		return head + "no entry: writes fail closed, 503 unavailable (check.unmatchedWrites: deny); reads pass", false
	}
	rt := e.Route
	req, kerr := rt.Request(in)
	out := head + "route " + e.Name
	switch {
	case !req.Write:
		out += ": a read (passes unchecked)"
	case rt.Policy == fencecheck.PolicyOff:
		out += ": a write, policy off (passes unchecked)"
	case kerr != nil:
		return out + fmt.Sprintf(": a write with no key, refused 400 malformed (%v)", kerr), false
	case req.Key == "" && rt.Key == nil:
		out += fmt.Sprintf(": a write; key from header %s (none given: --header \"%s: KEY\")", rt.KeyHeader, rt.KeyHeader)
	default:
		out += fmt.Sprintf(": a write; key %q, fence from %s, policy %s, mode %s, proof %s", req.Key, rt.FenceHeader, rt.Policy, rt.Mode, rt.Proof)
	}
	return out, true
}
