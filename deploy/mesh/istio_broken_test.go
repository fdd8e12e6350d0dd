package mesh

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/config"
)

// This file keeps the Istio generator as it was before #26, as a broken
// variant for the coverage test: one rule per entry, scoped to the
// entry's hosts and paths, and a catch-all for writes scoped to the
// table's hosts. A sidecar accepts any Host, so it let through every write
// sent to the Service name, a pod IP or "name..".

type oldIstioRule struct {
	To []struct {
		Operation oldIstioOperation `yaml:"operation"`
	} `yaml:"to"`
}

type oldIstioOperation struct {
	Hosts      []string `yaml:"hosts,omitempty"`
	Paths      []string `yaml:"paths,omitempty"`
	Methods    []string `yaml:"methods,omitempty"`
	NotMethods []string `yaml:"notMethods,omitempty"`
}

// oldReadMethods are the methods every entry's default write methods leave
// out; the catch-all rule sends every other method to fencegate.
var oldReadMethods = []string{"GET", "HEAD", "OPTIONS"}

// catchAllHosts are the hosts the policy's catch-all rule for writes
// names: every entry's (IstioHosts), or none (every host) when an entry
// names no host or a "*." wildcard, whose requests with a port Istio
// could not name.
func catchAllHosts(routes []config.Route) []string {
	var out []string
	for _, r := range routes {
		if len(r.Match.Hosts) == 0 {
			return nil
		}
		for _, h := range r.Match.Hosts {
			if strings.HasPrefix(h, "*.") {
				return nil
			}
		}
		out = append(out, IstioHosts(r.Match.Hosts)...)
	}
	return out
}

// Istio returns the AuthorizationPolicy (security.istio.io/v1, action
// CUSTOM, provider o.Provider) with one rule per route entry, selecting the
// entry's hosts, paths and methods.
func hostScopedIstio(routes []config.Route, o Options) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	var p struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			Selector *struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector,omitempty"`
			Action   string `yaml:"action"`
			Provider struct {
				Name string `yaml:"name"`
			} `yaml:"provider"`
			Rules []oldIstioRule `yaml:"rules"`
		} `yaml:"spec"`
	}
	p.APIVersion, p.Kind = "security.istio.io/v1", "AuthorizationPolicy"
	p.Metadata = meta("fencegate", o.Namespace)
	if len(o.Selector) > 0 {
		p.Spec.Selector = &struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}{o.Selector}
	}
	p.Spec.Action = "CUSTOM"
	p.Spec.Provider.Name = o.Provider
	var notes []string
	var rules []oldIstioRule
	for i, r := range routes {
		paths, widened, err := IstioPaths(r.Match.Path)
		if err != nil {
			return nil, err
		}
		op := oldIstioOperation{Hosts: IstioHosts(r.Match.Hosts), Paths: paths, Methods: r.Match.Methods}
		rule := oldIstioRule{To: []struct {
			Operation oldIstioOperation `yaml:"operation"`
		}{{op}}}
		rules = append(rules, rule)
		note := fmt.Sprintf("rules[%d]: %s", i, r.Name)
		if widened {
			note += fmt.Sprintf(" (Template %s, covered by %s: Istio paths take only a leading or trailing *; fencegate narrows it)", r.Match.Path.Value, paths[0])
		}
		notes = append(notes, note)
	}
	// Istio compares paths exactly and case-sensitively; fencegate's table
	// also reads "/Orders/42", "/orders%2F42" and the like, and refuses
	// writes it cannot route to one entry. Those writes must reach it: the
	// last rule sends every write on the table's hosts.
	rules = append(rules, oldIstioRule{To: []struct {
		Operation oldIstioOperation `yaml:"operation"`
	}{{oldIstioOperation{Hosts: catchAllHosts(routes), NotMethods: oldReadMethods}}}})
	notes = append(notes, fmt.Sprintf("rules[%d]: every write (not GET, HEAD, OPTIONS) on the table's hosts, whatever its path: fencegate\n"+
		"  refuses a write no entry routes (check.unmatchedWrites: deny); give unfenced write paths an entry\n"+
		"  with policy: off", len(routes)))
	p.Spec.Rules = rules
	return render(generated(""), []document{{
		comment: "Every request these rules match is checked by the extension provider " + o.Provider + "\n" +
			"(meshconfig.yaml): fencegate's ext_authz service. Istio sends no context_extensions, so\n" +
			"fencegate finds the entry in its own route table by host, path and method.\n" +
			strings.Join(notes, "\n"),
		object: p,
	}, istioDestinationRule(o)})
}

// fixedReadsIstio is Istio as it would be if IstioReadMethods ignored the
// entries' write methods: an entry writing with GET is not sent its GETs.
func fixedReadsIstio(routes []config.Route, o Options) ([]byte, error) {
	return istio(routes, o, func([]config.Route) ([]string, error) { return []string{"GET", "HEAD", "OPTIONS"}, nil })
}

// oldComment is the comment writer before #26: each "\n"-separated line
// behind "# ", as it is (a raw CR ends the comment for a YAML parser).
func oldComment(text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + line + "\n")
	}
	return b.String()
}
