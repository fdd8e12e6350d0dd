package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/mesh"
	"github.com/fencegate/fencegate/internal/routereload"
	"github.com/fencegate/fencegate/routes"
)

// selectorFlag collects repeated --selector k=v labels.
type selectorFlag map[string]string

func (s selectorFlag) String() string {
	var parts []string
	for k, v := range s {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (s selectorFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" || val == "" || strings.Contains(kv, "*") {
			return fmt.Errorf("want key=value labels without wildcards, got %q", kv)
		}
		if _, dup := s[k]; dup {
			return fmt.Errorf("label %q given twice", k)
		}
		s[k] = val
	}
	return nil
}

// routesIstio prints the Istio AuthorizationPolicy (action CUSTOM) whose
// rules cover every entry of the config file's route table, and the
// DestinationRule giving the selected proxies fencegate's client
// certificate (`fencegate routes istio`; deploy/mesh).
func routesIstio(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("routes istio", "usage: fencegate routes istio --config FILE [--namespace NS] [--selector k=v]...\n\nPrints the Istio AuthorizationPolicy (CUSTOM) and DestinationRule that send the route\ntable's requests to fencegate.")
	path := fs.String("config", "", "the config file whose routes: to cover (env FENCEGATE_CONFIG)")
	var o mesh.Options
	fs.StringVar(&o.Namespace, "namespace", "default", "namespace of the AuthorizationPolicy (the protected workload's; Istio's root namespace: mesh-wide)")
	selector := selectorFlag{}
	fs.Var(selector, "selector", "workload selector label key=value (repeat or comma-separate); none: every workload in --namespace")
	fs.StringVar(&o.Provider, "provider", "fencegate", "the meshConfig.extensionProviders entry naming fencegate's ext_authz service")
	fs.StringVar(&o.Service, "service", "fencegate", "fencegate's Service")
	fs.StringVar(&o.ServiceNamespace, "service-namespace", "fencegate", "fencegate's Service's namespace")
	fs.IntVar(&o.Port, "port", 9191, "fencegate's authz port")
	fs.StringVar(&o.ClientSecret, "client-secret", "fencegate-authz-client", "Secret (in --namespace) with fencegate's authz client certificate")
	hostSelects := fs.Bool("host-selects-workload", false, "the policy's workloads are chosen by Host (an ingress gateway's virtual hosts), so entries may differ by host alone; default: refuse such a table (behind a sidecar the client picks the entry by its Host)")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate routes istio: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *path == "" {
		*path = os.Getenv("FENCEGATE_CONFIG")
	}
	if *path == "" {
		fmt.Fprintln(stderr, "fencegate routes istio: --config (or FENCEGATE_CONFIG) is required")
		return exitUsage
	}
	if o.Port < 1 || o.Port > 65535 {
		fmt.Fprintln(stderr, "fencegate routes istio: --port must be in 1..65535")
		return exitUsage
	}
	o.Selector = selector
	c := config.Default()
	if err := c.LoadFile(*path); err != nil {
		fmt.Fprintln(stderr, "fencegate routes istio:", err)
		return exitFailure
	}
	// A policy for a table the gateway would refuse would send requests
	// to a fencegate that does not serve it: the table is compiled first.
	if err := c.ValidateRoutes(); err != nil {
		fmt.Fprintln(stderr, "fencegate routes istio: the route table does not load:", err)
		return exitFailure
	}
	t, err := routereload.Compile(&c)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate routes istio: the route table does not load:", err)
		return exitFailure
	}
	// Behind a sidecar every Host reaches the one workload: entries that
	// differ by host alone let the client choose the weaker one.
	if choices := routes.HostChoices(t); len(choices) > 0 && !*hostSelects {
		fmt.Fprintf(stderr, "fencegate routes istio: the client would choose the entry by its Host (a sidecar takes any Host):\n  - %s\n"+
			"give those paths one entry for every host, or pass --host-selects-workload if the policy selects an ingress gateway whose routes pick the backend by Host\n",
			strings.Join(choices, "\n  - "))
		return exitFailure
	}
	out, err := mesh.Istio(c.Routes, o)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate routes istio:", err)
		return exitFailure
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintln(stderr, "fencegate routes istio:", err)
		return exitFailure
	}
	return exitOK
}
