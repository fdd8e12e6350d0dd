package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/fencepolicy"
)

// runController is `fencegate controller`: the FencePolicy controller
// (internal/fencepolicy). A subcommand of the one binary, not a binary of
// its own: it ships in the image the chart already runs, and builds its
// entries with the same routes.Compile the gateways load them with. It
// links no client-go (a REST client over net/http), so nothing that
// `lock`, `client` or `fenceguard` users import changes.
func runController(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("controller", "usage: fencegate controller --gateway URL [flags]\n\nReconciles FencePolicy objects (fencegate.io/v1alpha1): publishes their route-table\nentries, emits the Gateway implementation's policies, writes truthful status.")
	kubeURL := fs.String("kube-url", "", "API server URL (default: in-cluster, KUBERNETES_SERVICE_HOST)")
	tokenFile := fs.String("kube-token-file", "", "bearer token file (default: the pod's service-account token)")
	caFile := fs.String("kube-ca-file", "", "API server CA file (default: the pod's service-account ca.crt)")
	namespace := fs.String("namespace", "", "the controller's namespace, where it publishes the ConfigMap (default: the pod's)")
	configMap := fs.String("configmap", "fencegate-policy-routes", "the ConfigMap the entries are published in (the gateways' routesFile)")
	service := fs.String("service", "fencegate", "fencegate's Service (Envoy Gateway's policies call its authz port)")
	serviceNS := fs.String("service-namespace", "", "fencegate's Service's namespace (default: --namespace)")
	servicePort := fs.Int("service-port", 9191, "fencegate's authz (ext_authz, ext_proc) Service port")
	istioProvider := fs.String("istio-provider", "fencegate", "the meshConfig extensionProviders name of fencegate")
	var gateways gatewayFlags
	fs.Var(&gateways, "gateway", "a gateway replica's metrics URL (http://fencegate-headless.fencegate.svc:8080/metrics: every address the host resolves to is a replica); repeatable")
	resync := fs.Duration("resync", 0, "period of the full reconciliation (default 1s)")
	maxWriteCap := fs.Duration("max-write-cap", fencecheck.DefaultMaxWriteCap, "the gateways' check.maxWriteCap")
	maxWaitCap := fs.Duration("max-wait-cap", fencecheck.DefaultMaxWaitCap, "the gateways' check.maxWaitCap")
	proofSigning := fs.Bool("proof-signing", false, "the gateways have a proof key (proof.keys or proof.verifyKeys); without it a FencePolicy with proof: signed is Invalid")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate controller: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	log := newLogger(config.Log{Level: *logLevel, Format: *logFormat}, stderr)
	k, err := fencepolicy.InCluster(*kubeURL, *tokenFile, *caFile, *namespace)
	if err != nil {
		fmt.Fprintf(stderr, "fencegate controller: %v\n", err)
		return exitUsage
	}
	c, err := fencepolicy.New(fencepolicy.Options{
		Kube: k, ConfigMap: *configMap, Service: *service, ServiceNamespace: *serviceNS, ServicePort: *servicePort,
		IstioProvider: *istioProvider, Gateways: gateways, Resync: *resync, MaxWriteCap: *maxWriteCap, MaxWaitCap: *maxWaitCap,
		ProofSigning: *proofSigning, Logger: log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "fencegate controller: %v\n", err)
		return exitUsage
	}
	log.Info("fencegate controller started", slog.String("namespace", k.Namespace), slog.String("configmap", *configMap))
	if err := c.Run(ctx); err != nil {
		log.Error("fencegate controller stopped", "err", err)
		return exitFailure
	}
	return exitOK
}

type gatewayFlags []string

func (g *gatewayFlags) String() string     { return strings.Join(*g, ",") }
func (g *gatewayFlags) Set(v string) error { *g = append(*g, v); return nil }
