package mesh

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/config"
	rtable "github.com/fencegate/fencegate/routes"
)

// Gateway API HTTPRoutes, one per entry (named as the entry), and the
// Envoy Gateway SecurityPolicies that target them: each names its entry to
// fencegate as the context extension fence_route, so fencegate does not
// have to match the request again.

type parentRef struct {
	Group     string `yaml:"group,omitempty"`
	Kind      string `yaml:"kind,omitempty"`
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace,omitempty"`
}

type backendRef struct {
	Group     *string `yaml:"group,omitempty"`
	Kind      string  `yaml:"kind,omitempty"`
	Name      string  `yaml:"name"`
	Namespace string  `yaml:"namespace,omitempty"`
	Port      int     `yaml:"port"`
}

type httpPathMatch struct {
	Type  string `yaml:"type"`
	Value string `yaml:"value"`
}

type httpRouteMatch struct {
	Path   httpPathMatch `yaml:"path"`
	Method string        `yaml:"method,omitempty"`
}

type httpRoute struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		ParentRefs []parentRef `yaml:"parentRefs"`
		Hostnames  []string    `yaml:"hostnames,omitempty"`
		Rules      []struct {
			Matches     []httpRouteMatch `yaml:"matches"`
			BackendRefs []backendRef     `yaml:"backendRefs"`
		} `yaml:"rules"`
	} `yaml:"spec"`
}

// GatewayPath is the Gateway API path match of an entry: PathPrefix and
// Exact as they are (both segment-wise there too), a Template with
// variables as a RegularExpression over whole segments (Envoy Gateway's
// matching is RE2 over the whole path; fencegate's own template check,
// which follows, is stricter).
func GatewayPath(p config.RoutePath) (httpPathMatch, error) {
	segs, err := segments(p)
	if err != nil {
		return httpPathMatch{}, err
	}
	switch {
	case segs == nil:
		return httpPathMatch{Type: "PathPrefix", Value: "/"}, nil
	case p.Type == "Exact":
		return httpPathMatch{Type: "Exact", Value: p.Value}, nil
	case p.Type == "Template" && hasVariable(segs):
		return httpPathMatch{Type: "RegularExpression", Value: segmentRegex(segs)}, nil
	case p.Type == "Template":
		return httpPathMatch{Type: "Exact", Value: literalPrefix(segs)}, nil
	default:
		return httpPathMatch{Type: "PathPrefix", Value: literalPrefix(segs)}, nil
	}
}

// canonicalHosts are an entry's hosts as fencegate matches them
// (routes.CanonicalHost: lower case, IDNA names in xn-- form, no trailing
// dot); check has refused a host without one.
func canonicalHosts(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		c, err := rtable.CanonicalHost(s)
		if err != nil {
			c = strings.ToLower(s)
		}
		out[i] = c
	}
	return out
}

// GatewayAPI returns a Gateway (o.Gateway, class o.GatewayClass, HTTP on
// port 80, routes from its own namespace) and one HTTPRoute per entry,
// matching the entry's hosts, path and methods and sending to o.Backend.
func GatewayAPI(routes []config.Route, o Options) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	type listener struct {
		Name          string `yaml:"name"`
		Protocol      string `yaml:"protocol"`
		Port          int    `yaml:"port"`
		AllowedRoutes struct {
			Namespaces struct {
				From string `yaml:"from"`
			} `yaml:"namespaces"`
		} `yaml:"allowedRoutes"`
	}
	var gw struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			GatewayClassName string     `yaml:"gatewayClassName"`
			Listeners        []listener `yaml:"listeners"`
		} `yaml:"spec"`
	}
	gw.APIVersion, gw.Kind = "gateway.networking.k8s.io/v1", "Gateway"
	gw.Metadata = meta(o.Gateway, o.Namespace)
	gw.Spec.GatewayClassName = o.GatewayClass
	l := listener{Name: "http", Protocol: "HTTP", Port: 80}
	l.AllowedRoutes.Namespaces.From = "Same"
	gw.Spec.Listeners = []listener{l}
	docs := []document{{
		comment: "The Gateway the routes attach to (class " + o.GatewayClass + "). Put TLS on it for real traffic.",
		object:  gw,
	}}
	for _, r := range routes {
		path, err := GatewayPath(r.Match.Path)
		if err != nil {
			return nil, err
		}
		var hr httpRoute
		hr.APIVersion, hr.Kind = "gateway.networking.k8s.io/v1", "HTTPRoute"
		hr.Metadata = meta(r.Name, o.Namespace)
		hr.Spec.ParentRefs = []parentRef{{Name: o.Gateway}}
		hr.Spec.Hostnames = canonicalHosts(r.Match.Hosts)
		var matches []httpRouteMatch
		if len(r.Match.Methods) == 0 {
			matches = []httpRouteMatch{{Path: path}}
		}
		for _, m := range r.Match.Methods {
			matches = append(matches, httpRouteMatch{Path: path, Method: m})
		}
		hr.Spec.Rules = append(hr.Spec.Rules, struct {
			Matches     []httpRouteMatch `yaml:"matches"`
			BackendRefs []backendRef     `yaml:"backendRefs"`
		}{matches, []backendRef{{Name: o.Backend, Port: o.BackendPort}}})
		note := "Route entry " + r.Name + "."
		if path.Type == "RegularExpression" {
			note += " Template " + r.Match.Path.Value + " as a regular expression over whole segments."
		}
		docs = append(docs, document{comment: note, object: hr})
	}
	return render(generated(""), docs)
}

// EnvoyGateway returns one SecurityPolicy per entry, targeting the entry's
// HTTPRoute (GatewayAPI's output), calling fencegate's ext_authz service
// with the context extension fence_route=<entry>, failing closed (503, no
// failOpen); and, when fencegate's Service is in another namespace, the
// ReferenceGrant that lets the policies name it.
func EnvoyGateway(routes []config.Route, o Options) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	type contextExtension struct {
		Name  string `yaml:"name"`
		Type  string `yaml:"type"`
		Value string `yaml:"value"`
	}
	type securityPolicy struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			TargetRefs []parentRef `yaml:"targetRefs"`
			ExtAuth    struct {
				GRPC struct {
					BackendRefs []backendRef `yaml:"backendRefs"`
				} `yaml:"grpc"`
				ContextExtensions []contextExtension `yaml:"contextExtensions"`
				Timeout           string             `yaml:"timeout"`
				FailOpen          bool               `yaml:"failOpen"`
				StatusOnError     int                `yaml:"statusOnError"`
			} `yaml:"extAuth"`
		} `yaml:"spec"`
	}
	var docs []document
	for _, r := range routes {
		var sp securityPolicy
		sp.APIVersion, sp.Kind = "gateway.envoyproxy.io/v1alpha1", "SecurityPolicy"
		sp.Metadata = meta(r.Name, o.Namespace)
		sp.Spec.TargetRefs = []parentRef{{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: r.Name}}
		ref := backendRef{Name: o.Service, Port: o.Port}
		if o.ServiceNamespace != o.Namespace {
			ref.Namespace = o.ServiceNamespace
		}
		sp.Spec.ExtAuth.GRPC.BackendRefs = []backendRef{ref}
		sp.Spec.ExtAuth.ContextExtensions = []contextExtension{{Name: RouteExtension, Type: "Value", Value: r.Name}}
		sp.Spec.ExtAuth.Timeout = "250ms"
		sp.Spec.ExtAuth.StatusOnError = 503
		docs = append(docs, document{comment: "Route entry " + r.Name + ": fencegate applies it by name (" + RouteExtension + ").", object: sp})
	}
	if o.ServiceNamespace != o.Namespace {
		type ref struct {
			Group     string `yaml:"group"`
			Kind      string `yaml:"kind"`
			Namespace string `yaml:"namespace,omitempty"`
			Name      string `yaml:"name,omitempty"`
		}
		var rg struct {
			APIVersion string     `yaml:"apiVersion"`
			Kind       string     `yaml:"kind"`
			Metadata   objectMeta `yaml:"metadata"`
			Spec       struct {
				From []ref `yaml:"from"`
				To   []ref `yaml:"to"`
			} `yaml:"spec"`
		}
		rg.APIVersion, rg.Kind = "gateway.networking.k8s.io/v1beta1", "ReferenceGrant"
		rg.Metadata = meta("fencegate-extauth-from-"+o.Namespace, o.ServiceNamespace)
		rg.Spec.From = []ref{{Group: "gateway.envoyproxy.io", Kind: "SecurityPolicy", Namespace: o.Namespace}}
		rg.Spec.To = []ref{{Group: "", Kind: "Service", Name: o.Service}}
		docs = append(docs, document{
			comment: "Lets the SecurityPolicies in " + o.Namespace + " name fencegate's Service in " + o.ServiceNamespace + ".",
			object:  rg,
		})
	}
	docs = append(docs, envoyGatewayTLS(o)...)
	return render(generated("Needs the HTTPRoutes of deploy/gateway-api (same table, same names)."), docs)
}

// envoyGatewayTLS are the objects that make Envoy Gateway's ext_authz calls
// mTLS: a BackendTLSPolicy verifying fencegate's serving certificate with
// the chart's CA, and an EnvoyProxy presenting fencegate's client
// certificate (fencegate's authz listener requires one, and trusts only
// such callers with route options).
func envoyGatewayTLS(o Options) []document {
	type ref struct {
		Group       string `yaml:"group"`
		Kind        string `yaml:"kind"`
		Name        string `yaml:"name"`
		SectionName string `yaml:"sectionName,omitempty"`
	}
	var btp struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			TargetRefs []ref `yaml:"targetRefs"`
			Validation struct {
				CACertificateRefs []ref  `yaml:"caCertificateRefs"`
				Hostname          string `yaml:"hostname"`
			} `yaml:"validation"`
		} `yaml:"spec"`
	}
	btp.APIVersion, btp.Kind = "gateway.networking.k8s.io/v1", "BackendTLSPolicy"
	btp.Metadata = meta(o.Service+"-authz", o.ServiceNamespace)
	btp.Spec.TargetRefs = []ref{{Group: "", Kind: "Service", Name: o.Service, SectionName: "authz"}}
	btp.Spec.Validation.CACertificateRefs = []ref{{Group: "", Kind: "ConfigMap", Name: o.CAConfigMap}}
	btp.Spec.Validation.Hostname = o.Service + "." + o.ServiceNamespace + ".svc"

	var ep struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			BackendTLS struct {
				ClientCertificateRef struct {
					Kind string `yaml:"kind"`
					Name string `yaml:"name"`
				} `yaml:"clientCertificateRef"`
			} `yaml:"backendTLS"`
		} `yaml:"spec"`
	}
	ep.APIVersion, ep.Kind = "gateway.envoyproxy.io/v1alpha1", "EnvoyProxy"
	ep.Metadata = meta(o.Gateway+"-proxy", o.Namespace)
	ep.Spec.BackendTLS.ClientCertificateRef.Kind = "Secret"
	ep.Spec.BackendTLS.ClientCertificateRef.Name = o.ClientSecret
	return []document{
		{
			comment: "Envoy verifies fencegate's serving certificate with the chart's CA: the ConfigMap\n" +
				o.CAConfigMap + " (key ca.crt: the ca.crt of " + o.ClientSecret + ") in " + o.ServiceNamespace + ".",
			object: btp,
		},
		{
			comment: "Envoy presents fencegate's client certificate (the Secret " + o.ClientSecret + ", the chart's,\n" +
				"copied into " + o.Namespace + "). Attach it to the Gateway: spec.infrastructure.parametersRef\n" +
				"{group: gateway.envoyproxy.io, kind: EnvoyProxy, name: " + o.Gateway + "-proxy}.",
			object: ep,
		},
	}
}

// contourName is an HTTPProxy name for a virtual host.
func contourName(host string) string {
	n := strings.Trim(strings.NewReplacer(".", "-", "*", "wildcard").Replace(strings.ToLower(host)), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

// Contour returns an ExtensionService for fencegate's ext_authz listener
// and one HTTPProxy per virtual host (the entries' hosts; o.Host for
// entries naming none), authorizing through it with each route's
// authPolicy.context naming the entry (fence_route).
func Contour(routes []config.Route, o Options) ([]byte, error) {
	if err := check(routes); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	type header struct {
		Name  string `yaml:"name"`
		Exact string `yaml:"exact"`
	}
	type condition struct {
		Prefix string  `yaml:"prefix,omitempty"`
		Exact  string  `yaml:"exact,omitempty"`
		Regex  string  `yaml:"regex,omitempty"`
		Header *header `yaml:"header,omitempty"`
	}
	type service struct {
		Name string `yaml:"name"`
		Port int    `yaml:"port"`
	}
	type route struct {
		Conditions []condition `yaml:"conditions"`
		AuthPolicy struct {
			Context map[string]string `yaml:"context"`
		} `yaml:"authPolicy"`
		Services []service `yaml:"services"`
	}
	type httpProxy struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			VirtualHost struct {
				FQDN string `yaml:"fqdn"`
				TLS  struct {
					SecretName string `yaml:"secretName"`
				} `yaml:"tls"`
				Authorization struct {
					ExtensionRef struct {
						Name      string `yaml:"name"`
						Namespace string `yaml:"namespace"`
					} `yaml:"extensionRef"`
					ResponseTimeout string `yaml:"responseTimeout"`
					FailOpen        bool   `yaml:"failOpen"`
				} `yaml:"authorization"`
			} `yaml:"virtualhost"`
			Routes []route `yaml:"routes"`
		} `yaml:"spec"`
	}

	var es struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			Protocol   string    `yaml:"protocol"`
			Services   []service `yaml:"services"`
			Validation struct {
				CASecret    string `yaml:"caSecret"`
				SubjectName string `yaml:"subjectName"`
			} `yaml:"validation"`
		} `yaml:"spec"`
	}
	es.APIVersion, es.Kind = "projectcontour.io/v1alpha1", "ExtensionService"
	es.Metadata = meta(o.Service, o.ServiceNamespace)
	es.Spec.Protocol = "h2"
	es.Spec.Services = []service{{Name: o.Service, Port: o.Port}}
	es.Spec.Validation.CASecret = o.ClientSecret
	es.Spec.Validation.SubjectName = o.Service + "." + o.ServiceNamespace + ".svc"
	docs := []document{{
		comment: "fencegate's ext_authz listener, over TLS verified with the chart's CA (ca.crt of " + o.ClientSecret + ").\n" +
			"fencegate requires a client certificate: give Envoy one from the same CA through Contour's\n" +
			"envoy-client-certificate setting.",
		object: es,
	}}

	// Group the entries by virtual host, in table order.
	var hosts []string
	byHost := map[string][]config.Route{}
	for _, r := range routes {
		hs := canonicalHosts(r.Match.Hosts)
		if len(hs) == 0 {
			if o.Host == "" {
				return nil, fmt.Errorf("route entry %q names no host: Contour needs a virtual host (Options.Host)", r.Name)
			}
			hs = []string{strings.ToLower(o.Host)}
		}
		for _, h := range hs {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
			byHost[h] = append(byHost[h], r)
		}
	}
	for _, h := range hosts {
		var hp httpProxy
		hp.APIVersion, hp.Kind = "projectcontour.io/v1", "HTTPProxy"
		hp.Metadata = meta(contourName(h), o.Namespace)
		hp.Spec.VirtualHost.FQDN = h
		hp.Spec.VirtualHost.TLS.SecretName = o.TLSSecret
		hp.Spec.VirtualHost.Authorization.ExtensionRef.Name = o.Service
		hp.Spec.VirtualHost.Authorization.ExtensionRef.Namespace = o.ServiceNamespace
		hp.Spec.VirtualHost.Authorization.ResponseTimeout = "250ms"
		for _, r := range byHost[h] {
			segs, err := segments(r.Match.Path)
			if err != nil {
				return nil, err
			}
			var path condition
			switch kind, value := contourPath(r.Match.Path, segs); kind {
			case "prefix":
				path.Prefix = value
			case "exact":
				path.Exact = value
			default:
				path.Regex = value
			}
			methods := r.Match.Methods
			if len(methods) == 0 {
				methods = []string{""}
			}
			for _, m := range methods {
				var rt route
				rt.Conditions = []condition{path}
				if m != "" {
					rt.Conditions = append(rt.Conditions, condition{Header: &header{Name: ":method", Exact: m}})
				}
				rt.AuthPolicy.Context = map[string]string{RouteExtension: r.Name}
				rt.Services = []service{{Name: o.Backend, Port: o.BackendPort}}
				hp.Spec.Routes = append(hp.Spec.Routes, rt)
			}
		}
		docs = append(docs, document{
			comment: "Virtual host " + h + ": every route is authorized by fencegate, naming its entry (" + RouteExtension + ").",
			object:  hp,
		})
	}
	return render(generated(""), docs)
}

// ContourPath is the HTTPProxy path condition (prefix, exact or regex, and
// its value) matching exactly the paths of an entry's path match.
func ContourPath(p config.RoutePath) (kind, value string, err error) {
	segs, err := segments(p)
	if err != nil {
		return "", "", err
	}
	kind, value = contourPath(p, segs)
	return kind, value, nil
}

func contourPath(p config.RoutePath, segs []segment) (kind, value string) {
	switch {
	case segs == nil:
		return "prefix", "/"
	case p.Type == "Exact":
		return "exact", p.Value
	case p.Type == "Template" && hasVariable(segs):
		return "regex", segmentRegex(segs)
	case p.Type == "Template":
		return "exact", literalPrefix(segs)
	default:
		// Contour's prefix is a string prefix ("/orders" takes
		// "/ordersX"); the entry's is segment-wise.
		return "regex", regexp.QuoteMeta(literalPrefix(segs)) + "(/.*)?"
	}
}
