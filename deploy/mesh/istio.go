package mesh

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
)

// Istio's CUSTOM action sends the ext_authz check to one provider and no
// context_extensions: fencegate resolves each request's entry from its own
// table by host, path and method. The AuthorizationPolicy only decides
// which requests are checked at all, so it must send every request the
// table could govern or refuse as a write, in every spelling.

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
	} `yaml:"to,omitempty"`
	When []istioCondition `yaml:"when,omitempty"`
}

type istioCondition struct {
	Key    string   `yaml:"key"`
	Values []string `yaml:"values"`
}

// MethodOverrideHeaders are the headers that make frameworks (Rails,
// Laravel, Symfony, Express's method-override, ASP.NET) run another method
// than the request's, as the proxy refuses them (proxy/headers.go), with
// the underscore spellings CGI and WSGI read alike. A GET carrying one may
// be a DELETE to the workload: the policy sends it to fencegate whatever
// its method.
var MethodOverrideHeaders = []string{"x-http-method-override", "x-http-method", "x-method-override",
	"x_http_method_override", "x_http_method", "x_method_override"}

type istioOperation struct {
	NotMethods []string `yaml:"notMethods,omitempty"`
}

// IstioReadMethods are the methods the policy does not send to fencegate:
// of GET, HEAD and OPTIONS (spelt exactly so: Istio compares methods
// exactly), those that no entry's write methods, and not the default's,
// count as a write. Every other method, in every spelling ("get",
// "Delete", "PROPFIND"), is sent: fencegate answers a read cheaply, and a
// method Istio let through unchecked would be a write no one checked.
func IstioReadMethods(routes []config.Route) ([]string, error) {
	sets := []fencecheck.MethodSet{{}} // the default: unmatched writes, Refuse
	for _, r := range routes {
		ms, err := fencecheck.WriteMethods(r.Methods)
		if err != nil {
			return nil, fmt.Errorf("routes %q: %w", r.Name, err)
		}
		sets = append(sets, ms)
	}
	var out []string
	for _, m := range []string{"GET", "HEAD", "OPTIONS"} {
		if !slices.ContainsFunc(sets, func(ms fencecheck.MethodSet) bool { return ms.IsWrite(m) }) {
			out = append(out, m)
		}
	}
	return out, nil
}

// Istio returns the AuthorizationPolicy (security.istio.io/v1, action
// CUSTOM, provider o.Provider) sending fencegate every request whose
// method is not exactly one of IstioReadMethods and every request carrying
// one of MethodOverrideHeaders, and the DestinationRule giving the
// selected proxies fencegate's client certificate.
//
// The rules name no host and no path, on purpose. A sidecar's inbound
// listener takes any Host (the Service name, a pod IP, "name:port",
// "name.."), so a rule scoped to the table's hosts lets every other
// spelling of the same workload pass unchecked; and Istio compares paths
// exactly and case-sensitively while fencegate's table also governs (or
// refuses) "/Orders/42", "/orders%2F42" and "/%61dmin". Which entry, if
// any, governs a request is fencegate's to decide from its own table.
func Istio(routes []config.Route, o Options) ([]byte, error) {
	return istio(routes, o, IstioReadMethods)
}

// istio is Istio with the read methods from readMethods (the tests pass
// broken ones).
func istio(routes []config.Route, o Options, readMethods func([]config.Route) ([]string, error)) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	reads, err := readMethods(routes)
	if err != nil {
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
	var rule istioRule
	what := "every request (an entry counts GET, HEAD and OPTIONS as writes): an empty rule matches all"
	if len(reads) > 0 {
		rule.To = []struct {
			Operation istioOperation `yaml:"operation"`
		}{{istioOperation{NotMethods: reads}}}
		what = "every request whose method is not exactly " + strings.Join(reads, ", ")
	}
	p.Spec.Rules = []istioRule{rule}
	if len(reads) > 0 {
		for _, h := range MethodOverrideHeaders {
			p.Spec.Rules = append(p.Spec.Rules, istioRule{When: []istioCondition{{Key: "request.headers[" + h + "]", Values: []string{"*"}}}})
		}
		what += ";\nrules[1:]: every request carrying a method-override header (" + strings.Join(MethodOverrideHeaders[:3], ", ") + ",\n" +
			"  or their underscore spellings), whatever its method: a GET may be a DELETE to the workload"
	}
	return render(generated(""), []document{{
		comment: "Every request these rules match is checked by the extension provider " + o.Provider + "\n" +
			"(meshconfig.yaml): fencegate's ext_authz service. Istio sends no context_extensions, so\n" +
			"fencegate finds the entry in its own route table by host, path and method.\n" +
			"rules[0]: " + what + ".\n" +
			"All on any host and any path. No host: a sidecar accepts any Host (the Service name, a pod IP,\n" +
			"  a port, trailing dots); no path: Istio compares paths exactly, fencegate reads their\n" +
			"  spellings. fencegate refuses a write no entry routes (check.unmatchedWrites: deny): give\n" +
			"  unfenced write paths an entry with policy: off. A method spelt otherwise (`get`,\n" +
			"  `Delete`, PROPFIND) is sent too: fencegate judges it under every reading (`get` as GET\n" +
			"  and as sent, a write where either is one; readings that pick different entries: 400).",
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
