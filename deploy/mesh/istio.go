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
	Hosts   []string `yaml:"hosts,omitempty"`
	Paths   []string `yaml:"paths,omitempty"`
	Methods []string `yaml:"methods,omitempty"`
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
		return []string{p.Value}, false, nil
	case p.Type == "Template" && hasVariable(segs):
		return []string{literalPrefix(segs) + "/*"}, true, nil
	case p.Type == "Template":
		// No variable: the template is one path.
		return []string{literalPrefix(segs)}, false, nil
	default: // PathPrefix, segment-wise
		prefix := literalPrefix(segs)
		return []string{prefix, prefix + "/*"}, false, nil
	}
}

// IstioHosts are the Istio `hosts` covering an entry's hosts: Istio
// compares the Host header with its port, fencegate without, so an exact
// name also matches "name:*". A "*." wildcard cannot take a port pattern
// too (one "*" per value): requests to such a host with an explicit port
// are not matched by Istio, and the table's hosts should name them.
func IstioHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.ToLower(h)
		if strings.HasPrefix(h, "*.") {
			out = append(out, h)
			continue
		}
		out = append(out, h, h+":*")
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
