package mesh

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/config"
)

// Istio's CUSTOM action sends the ext_authz check to one provider and no
// context_extensions: fencegate resolves each request's entry from its own
// table by host, path and method. The AuthorizationPolicy only decides
// which requests are checked at all, so its rules must cover every entry.

type authorizationPolicy struct {
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
		Rules []istioRule `yaml:"rules"`
	} `yaml:"spec"`
}

type istioRule struct {
	To []struct {
		Operation istioOperation `yaml:"operation"`
	} `yaml:"to"`
}

type istioOperation struct {
	Hosts      []string `yaml:"hosts,omitempty"`
	Paths      []string `yaml:"paths,omitempty"`
	Methods    []string `yaml:"methods,omitempty"`
	NotMethods []string `yaml:"notMethods,omitempty"`
}

// IstioPaths are the Istio `paths` covering an entry's path match (Istio
// allows a "*" only as a whole prefix or suffix): nil for every path;
// PathPrefix "/orders" → "/orders", "/orders/*"; Exact → itself; a
// Template → its literal prefix + "/*" (wider than the template: fencegate
// narrows it). The bool reports a widened Template.
func IstioPaths(p config.RoutePath) ([]string, bool, error) {
	segs, err := segments(p)
	if err != nil {
		return nil, false, err
	}
	if segs == nil {
		return nil, false, nil
	}
	switch {
	case p.Type == "Exact":
		return withSlash(p.Value), false, nil
	case p.Type == "Template" && hasVariable(segs):
		return []string{literalPrefix(segs) + "/*"}, true, nil
	case p.Type == "Template":
		// No variable: the template is one path.
		return withSlash(literalPrefix(segs)), false, nil
	default: // PathPrefix, segment-wise
		prefix := literalPrefix(segs)
		return []string{prefix, prefix + "/*"}, false, nil
	}
}

// withSlash is an exact path and the same path with a trailing "/",
// which fencegate's table matches as the same path and Istio, comparing
// exactly, would not send.
func withSlash(p string) []string {
	if p == "/" {
		return []string{p}
	}
	return []string{p, p + "/"}
}

// IstioHosts are the Istio `hosts` covering an entry's hosts: Istio
// compares the Host header as sent, with its port and a trailing dot,
// fencegate without either, so an exact name also matches "name:*",
// "name." and "name.:*". A "*." wildcard cannot take a port pattern too
// (one "*" per value): such a host with an explicit port is left to the
// policy's catch-all rule for writes (Istio), which names no host when
// any entry has a wildcard.
func IstioHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.ToLower(h)
		if strings.HasPrefix(h, "*.") {
			out = append(out, h, h+".")
			continue
		}
		out = append(out, h, h+":*", h+".", h+".:*")
	}
	return out
}

// readMethods are the methods every entry's default write methods leave
// out; the catch-all rule sends every other method to fencegate.
var readMethods = []string{"GET", "HEAD", "OPTIONS"}

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
func Istio(routes []config.Route, o Options) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	var p authorizationPolicy
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
	for i, r := range routes {
		paths, widened, err := IstioPaths(r.Match.Path)
		if err != nil {
			return nil, err
		}
		op := istioOperation{Hosts: IstioHosts(r.Match.Hosts), Paths: paths, Methods: r.Match.Methods}
		rule := istioRule{To: []struct {
			Operation istioOperation `yaml:"operation"`
		}{{op}}}
		p.Spec.Rules = append(p.Spec.Rules, rule)
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
	p.Spec.Rules = append(p.Spec.Rules, istioRule{To: []struct {
		Operation istioOperation `yaml:"operation"`
	}{{istioOperation{Hosts: catchAllHosts(routes), NotMethods: readMethods}}}})
	notes = append(notes, fmt.Sprintf("rules[%d]: every write (not GET, HEAD, OPTIONS) on the table's hosts, whatever its path: fencegate\n"+
		"  refuses a write no entry routes (check.unmatchedWrites: deny); give unfenced write paths an entry\n"+
		"  with policy: off", len(routes)))
	return render(generated(""), []document{{
		comment: "Every request these rules match is checked by the extension provider " + o.Provider + "\n" +
			"(meshconfig.yaml): fencegate's ext_authz service. Istio sends no context_extensions, so\n" +
			"fencegate finds the entry in its own route table by host, path and method.\n" +
			strings.Join(notes, "\n"),
		object: p,
	}, istioDestinationRule(o)})
}

// istioDestinationRule gives the selected workloads' proxies fencegate's
// client certificate for the authz port, so fencegate sees an
// mTLS-verified, trusted caller (docs/api.md "Trusted callers").
func istioDestinationRule(o Options) document {
	type tls struct {
		Mode           string `yaml:"mode"`
		CredentialName string `yaml:"credentialName"`
		SNI            string `yaml:"sni"`
	}
	type portLevel struct {
		Port struct {
			Number int `yaml:"number"`
		} `yaml:"port"`
		TLS tls `yaml:"tls"`
	}
	var dr struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			Host             string `yaml:"host"`
			WorkloadSelector *struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"workloadSelector,omitempty"`
			TrafficPolicy struct {
				PortLevelSettings []portLevel `yaml:"portLevelSettings"`
			} `yaml:"trafficPolicy"`
		} `yaml:"spec"`
	}
	dr.APIVersion, dr.Kind = "networking.istio.io/v1", "DestinationRule"
	dr.Metadata = meta("fencegate-authz", o.Namespace)
	dr.Spec.Host = o.serviceHost()
	if len(o.Selector) > 0 {
		dr.Spec.WorkloadSelector = &struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}{o.Selector}
	}
	pl := portLevel{TLS: tls{Mode: "MUTUAL", CredentialName: o.ClientSecret, SNI: o.Service + "." + o.ServiceNamespace + ".svc"}}
	pl.Port.Number = o.Port
	dr.Spec.TrafficPolicy.PortLevelSettings = []portLevel{pl}
	return document{
		comment: "The ext_authz calls carry fencegate's client certificate (the Secret " + o.ClientSecret + ",\n" +
			"the Helm chart's authz client certificate, copied into " + o.Namespace + "): fencegate's authz\n" +
			"listener requires one and trusts only such callers. Istio reads credentialName at a sidecar\n" +
			"only when the rule has a workloadSelector (at gateways always).",
		object: dr,
	}
}

// IstioMeshConfig returns the meshConfig snippet declaring the extension
// provider (for IstioOperator spec.meshConfig, istiod's Helm values or the
// istio ConfigMap's mesh key: not a Kubernetes object, so no API server
// validates it). Istio's extension providers offer ext_authz (HTTP and
// gRPC) but no ext_proc: barrier entries cannot be served through Istio.
func IstioMeshConfig(o Options) ([]byte, error) {
	o = o.withDefaults()
	type grpcProvider struct {
		Service       string `yaml:"service"`
		Port          int    `yaml:"port"`
		Timeout       string `yaml:"timeout"`
		FailOpen      bool   `yaml:"failOpen"`
		StatusOnError string `yaml:"statusOnError"`
	}
	type provider struct {
		Name              string       `yaml:"name"`
		EnvoyExtAuthzGrpc grpcProvider `yaml:"envoyExtAuthzGrpc"`
	}
	mc := map[string]any{"meshConfig": map[string]any{"extensionProviders": []provider{{
		Name: o.Provider,
		EnvoyExtAuthzGrpc: grpcProvider{
			Service: o.serviceHost(), Port: o.Port,
			Timeout: "0.250s", FailOpen: false, StatusOnError: "503",
		},
	}}}}
	return render(generated(""), []document{{
		comment: "The extension provider the AuthorizationPolicy names: merge into IstioOperator\n" +
			"spec.meshConfig, istiod's Helm values (meshConfig:) or the istio ConfigMap's mesh key.\n" +
			"Fails closed: no failOpen, and 503 when fencegate cannot be reached or answer in time.\n" +
			"Istio's extension providers offer ext_authz only (no ext_proc): barrier entries need\n" +
			"fencegate's proxy. This is not a Kubernetes object: no API server validates it.",
		object: mc,
	}})
}
