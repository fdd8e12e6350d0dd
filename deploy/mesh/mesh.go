// Package mesh turns fencegate's route table (config.Route, the `routes:`
// list) into the configuration of the meshes and gateways that call
// fencegate's ext_authz service: an Istio AuthorizationPolicy (action
// CUSTOM) and its meshConfig extension provider, Envoy Gateway
// SecurityPolicies, Gateway API HTTPRoutes and Contour HTTPProxies. One
// table feeds them all, so the paths a mesh sends to fencegate and the
// entries fencegate enforces cannot drift apart.
//
// Where a mesh's matching is coarser than fencegate's (Istio paths allow
// only a leading or trailing "*"), the generated match covers the entry
// and fencegate narrows it: a request the mesh sends that the entry does
// not govern is resolved by fencegate's own table. The mesh must never
// match less than the entry, or writes would pass unchecked.
//
// The shipped manifests under deploy/istio, deploy/envoy-gateway,
// deploy/gateway-api and deploy/contour are this package's output for
// deploy/mesh/routes.yaml (a test fails when they differ; -update rewrites
// them), and a test has a real kube-apiserver, with the projects' own CRDs
// installed, validate them by a server-side dry run.
package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencewire"
	rtable "github.com/fencegate/fencegate/routes"
)

// Options say where the generated objects live and what they point at.
// The zero value of each field is its default.
type Options struct {
	// Namespace of the generated policies and routes (the protected
	// workload's). Default "default".
	Namespace string
	// Selector is the Istio workload selector of the AuthorizationPolicy
	// (the protected workload's pod labels, or an ingress gateway's);
	// empty: every workload in Namespace (mesh-wide in Istio's root
	// namespace).
	Selector map[string]string
	// Provider is the name of the Istio extension provider
	// (meshConfig.extensionProviders). Default "fencegate".
	Provider string
	// Service, ServiceNamespace and Port locate fencegate's ext_authz
	// listener: default the Helm chart's Service "fencegate" in namespace
	// "fencegate", port 9191 (authz).
	Service          string
	ServiceNamespace string
	Port             int
	// Gateway is the Gateway API Gateway the HTTPRoutes attach to (in
	// Namespace); default "gateway". GatewayClass is its class (default
	// "eg", Envoy Gateway's usual name).
	Gateway      string
	GatewayClass string
	// Backend and BackendPort are the protected API's Service, the
	// HTTPRoutes' and HTTPProxies' destination. Default "api", 8080.
	Backend     string
	BackendPort int
	// Host is Contour's virtual host (fqdn) for entries that name no host;
	// required when such an entry exists. TLSSecret is that virtual host's
	// certificate Secret (Contour authorizes only on TLS virtual hosts);
	// default "<Backend>-tls".
	Host      string
	TLSSecret string
	// ClientSecret is the Secret with fencegate's authz client certificate
	// (tls.crt, tls.key, ca.crt) the callers present; default
	// "fencegate-authz-client", the Helm chart's for release fencegate.
	ClientSecret string
	// CAConfigMap is a ConfigMap in ServiceNamespace whose ca.crt is the CA
	// of fencegate's serving certificate (Gateway API's BackendTLSPolicy
	// takes a ConfigMap); default "fencegate-authz-ca".
	CAConfigMap string
}

func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.Namespace, "default")
	def(&o.Provider, "fencegate")
	def(&o.Service, "fencegate")
	def(&o.ServiceNamespace, "fencegate")
	def(&o.Gateway, "gateway")
	def(&o.GatewayClass, "eg")
	def(&o.Backend, "api")
	def(&o.TLSSecret, o.Backend+"-tls")
	def(&o.ClientSecret, "fencegate-authz-client")
	def(&o.CAConfigMap, "fencegate-authz-ca")
	if o.Port == 0 {
		o.Port = 9191
	}
	if o.BackendPort == 0 {
		o.BackendPort = 8080
	}
	return o
}

// serviceHost is fencegate's Service as a cluster DNS name.
func (o Options) serviceHost() string {
	return o.Service + "." + o.ServiceNamespace + ".svc.cluster.local"
}

// RouteExtension is the ext_authz context extension (Envoy Gateway
// contextExtensions, Contour authPolicy.context) naming the entry.
const RouteExtension = fencewire.ExtRoute

// maxEntries bounds the table a generator accepts: Istio's rules and a
// Gateway API route's matches are bounded lists, and a table this large is
// a mistake, not a configuration.
const maxEntries = 512

// dns1123 is a Kubernetes object name (a DNS subdomain label, kept to 63
// so a prefixed name still fits).
var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// httpMethod is a method token as Istio and the Gateway API accept it.
var httpMethod = regexp.MustCompile(`^[A-Z]+$`)

// check refuses what no mesh can express faithfully: the generators would
// otherwise emit a policy that matches less than the entry.
func check(routes []config.Route) error {
	if len(routes) == 0 {
		return errors.New("mesh: the route table is empty")
	}
	if len(routes) > maxEntries {
		return fmt.Errorf("mesh: %d route entries, at most %d", len(routes), maxEntries)
	}
	var errs []error
	seen := map[string]bool{}
	for i, r := range routes {
		where := fmt.Sprintf("routes[%d] %q", i, r.Name)
		switch {
		case r.Name == "":
			errs = append(errs, fmt.Errorf("%s: no name", where))
		case len(r.Name) > 50 || !dns1123.MatchString(r.Name):
			errs = append(errs, fmt.Errorf("%s: the name must be a DNS label of at most 50 characters ([a-z0-9-]) to name the generated objects", where))
		case seen[r.Name]:
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
		}
		seen[r.Name] = true
		for _, f := range append([]string{r.Name, r.Match.Path.Value, r.Key, r.KeyHeader, r.FenceHeader, r.Methods, r.Upstream}, append(r.Match.Hosts, r.Match.Methods...)...) {
			if !config.Printable(f) {
				errs = append(errs, fmt.Errorf("%s: %q holds a control character, a line separator or invalid UTF-8", where, f))
			}
		}
		if r.Barrier {
			errs = append(errs, fmt.Errorf("%s: barrier entries need ext_proc or fencegate's proxy; ext_authz cannot report a write's completion", where))
		}
		if _, err := segments(r.Match.Path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		for _, m := range r.Match.Methods {
			if !httpMethod.MatchString(m) {
				errs = append(errs, fmt.Errorf("%s: match method %q is not an upper-case token", where, m))
			}
		}
		for _, h := range r.Match.Hosts {
			if _, err := rtable.CanonicalHost(h); err != nil || h == "" || strings.ContainsAny(h, " /:") || strings.Count(h, "*") > 1 || (strings.Contains(h, "*") && !strings.HasPrefix(h, "*.")) {
				errs = append(errs, fmt.Errorf("%s: host %q: want a host name or a \"*.\" wildcard, without a port", where, h))
			}
		}
	}
	return errors.Join(errs...)
}

// segment is one segment of a path match: a literal, or a variable
// ({int}, {uuid}, or "*" for any one segment).
type segment struct {
	literal  string
	variable string // "", "int", "uuid", "*"
}

// segments splits an entry's path into segments: nil for "every path".
// PathPrefix "/" is every path too.
func segments(p config.RoutePath) ([]segment, error) {
	v := p.Value
	switch p.Type {
	case "", "PathPrefix", "Exact", "Template":
	default:
		return nil, fmt.Errorf("path type %q: want Exact, PathPrefix or Template", p.Type)
	}
	if v == "" {
		if p.Type == "Exact" || p.Type == "Template" {
			return nil, fmt.Errorf("path type %s needs a value", p.Type)
		}
		return nil, nil
	}
	if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?#\\ ") || strings.Contains(v, "//") {
		return nil, fmt.Errorf("path %q: want an absolute path without query, fragment, backslash, space or empty segment", v)
	}
	var out []segment
	for _, s := range strings.Split(strings.TrimSuffix(v[1:], "/"), "/") {
		if s == "" {
			continue
		}
		switch {
		case p.Type == "Template" && s == "*":
			out = append(out, segment{variable: "*"})
		case p.Type == "Template" && (s == "{int}" || s == "{uuid}"):
			out = append(out, segment{variable: s[1 : len(s)-1]})
		case strings.ContainsAny(s, "{}*"):
			return nil, fmt.Errorf("path %q: segment %q: only Template paths take {int}, {uuid} or a whole-segment *", v, s)
		default:
			out = append(out, segment{literal: s})
		}
	}
	return out, nil
}

// literalPrefix is the path of the segments before the first variable.
func literalPrefix(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		if s.variable != "" {
			break
		}
		b.WriteString("/" + s.literal)
	}
	return b.String()
}

func hasVariable(segs []segment) bool {
	return slices.ContainsFunc(segs, func(s segment) bool { return s.variable != "" })
}

// segmentRegex is an RE2 pattern matching exactly the whole paths of a
// Template (Envoy's safe_regex matches the whole path): a covering
// pattern, as fencegate's own template checks are stricter ({int} there is
// canonical).
func segmentRegex(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString("/")
		switch s.variable {
		case "":
			b.WriteString(regexp.QuoteMeta(s.literal))
		case "int":
			b.WriteString("[0-9]+")
		case "uuid":
			b.WriteString("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
		case "*":
			b.WriteString("[^/]+")
		}
	}
	return b.String()
}

// document is one YAML document: a comment above it and the object.
type document struct {
	comment string
	object  any
}

// render writes documents as a YAML stream, 2-space indented, each
// preceded by its comment lines.
func render(header string, docs []document) ([]byte, error) {
	var out bytes.Buffer
	out.WriteString(commentFn(header))
	for i, d := range docs {
		if i > 0 {
			out.WriteString("---\n")
		}
		out.WriteString(commentFn(d.comment))
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(d.object); err != nil {
			return nil, err
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
		out.Write(b.Bytes())
	}
	return out.Bytes(), nil
}

// comment renders text as YAML comment lines. Only "\n" ends a line;
// every other character a YAML parser could read as a line break or that
// no comment may hold (C0 and C1 controls, DEL, U+2028, U+2029, a byte
// order mark, invalid UTF-8) is written escaped, so text from a route
// table can never end the comment and become YAML.
// commentFn is comment; only the tests swap it, for a broken variant.
var commentFn = comment

func comment(text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + escapeComment(line) + "\n")
	}
	return b.String()
}

// escapeComment writes the characters comment must not hold as \xNN,
// \uNNNN, and a backslash as "\\" so the escaping reads back unambiguously.
func escapeComment(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02X", s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x2028, r == 0x2029, r == 0xFEFF:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// generated is the header every generated file starts with.
func generated(what string) string {
	return "Generated from fencegate's route table (package deploy/mesh; `fencegate routes istio`).\n" +
		"Edit the table, not this file, then generate again. The copies shipped under deploy/ come\n" +
		"from deploy/mesh/routes.yaml: `go test ./deploy/mesh -run 'TestShippedManifests$' -args -update`.\n" + what
}

// objectMeta is the metadata the generated objects carry.
type objectMeta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace,omitempty"`
	Labels    map[string]string `yaml:"labels,omitempty"`
}

func meta(name, namespace string) objectMeta {
	return objectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "fencegate-routes"}}
}
