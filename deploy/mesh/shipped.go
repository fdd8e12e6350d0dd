package mesh

import (
	"fmt"

	"github.com/fencegate/fencegate/config"
)

// ShippedOptions are the options the shipped manifests are generated with:
// the orders API of routes.yaml in namespace shop (pods labelled
// app: orders, Service orders:8080, TLS Secret orders-tls), fencegate as
// the Helm chart installs it (release fencegate in namespace fencegate).
var ShippedOptions = Options{
	Namespace:   "shop",
	Selector:    map[string]string{"app": "orders"},
	Provider:    "fencegate",
	Backend:     "orders",
	BackendPort: 8080,
	Host:        "api.example.com",
	TLSSecret:   "orders-tls",
}

// Shipped returns the generated manifests for routes with o, by their path
// relative to the deploy folder.
func Shipped(routes []config.Route, o Options) (map[string][]byte, error) {
	out := map[string][]byte{}
	for path, gen := range map[string]func() ([]byte, error){
		"istio/authorizationpolicy.yaml":    func() ([]byte, error) { return Istio(routes, o) },
		"istio/meshconfig.yaml":             func() ([]byte, error) { return IstioMeshConfig(o) },
		"gateway-api/httproutes.yaml":       func() ([]byte, error) { return GatewayAPI(routes, o) },
		"envoy-gateway/securitypolicy.yaml": func() ([]byte, error) { return EnvoyGateway(routes, o) },
		"contour/httpproxy.yaml":            func() ([]byte, error) { return Contour(routes, o) },
	} {
		b, err := gen()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[path] = b
	}
	return out, nil
}
