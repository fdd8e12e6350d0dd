package helm

import (
	"encoding/base64"
	"path/filepath"
	"slices"
	"strings"
)

// Required are the values the chart refuses to render without: a store,
// one token (its digest only) and, with admission, where the API server's
// webhook calls come from.
var Required = []string{
	"--set", "store.url=redis://redis.data.svc:6379/0",
	"--set", "tokens[0].name=orders",
	"--set", "tokens[0].sha256=" + strings.Repeat("ab", 32),
	"--set", "tokens[0].prefixes={orders/}",
	"--set", "networkPolicy.webhookFrom={172.16.0.0/28}",
}

// VariantCAPEM stands in for the CA bundle a user provides without
// cert-manager (the chart passes it on to the webhook's caBundle).
const VariantCAPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// Variants are value sets (helm arguments) that between them switch every
// optional part of the chart on and off. The chart's tests lint and render
// each; e2e/kube applies each to a real API server with a server-side dry
// run.
func Variants() map[string][]string {
	with := func(extra ...string) []string { return append(slices.Clone(Required), extra...) }
	return map[string][]string{
		"deploy/k8s": {"-f", filepath.Join(filepath.Dir(ChartDir()), "values-k8s.yaml")},
		"minimal":    slices.Clone(Required),
		"provided CA": with(
			"--set", "admission.certificates.certManager=false",
			"--set", "admission.certificates.secretName=my-webhook-tls",
			"--set", "admission.certificates.caBundle="+base64.StdEncoding.EncodeToString([]byte(VariantCAPEM)),
			"--set", "authz.tls.certManager=false",
			"--set", "authz.tls.secretName=my-authz-tls"),
		"monitored, narrowed": with(
			"--set", "serviceMonitor.enabled=true",
			"--set", "networkPolicy.lockClientNamespaces={shop,billing}",
			"--set", "networkPolicy.webhookFrom={10.0.0.0/24}",
			"--set", "networkPolicy.metricsNamespaces={monitoring}",
			"--set", "admission.rules[0].apiGroups={apps}",
			"--set", "admission.rules[0].resources={deployments,statefulsets}"),
		"no admission": with("--set", "admission.enabled=false"),
		// FencePolicy: the controller, its RBAC, the replicas' Service,
		// the gateways' routesFile.
		"fence policies": with("--set", "fencePolicy.enabled=true"),
		// The route table the shipped mesh manifests are generated from.
		// Its orders entry asks for signed proofs, so the chart needs a key
		// (it refuses to render a table the gateway would refuse to start with).
		"route table": with("-f", filepath.Join(filepath.Dir(filepath.Dir(ChartDir())), "mesh", "routes.yaml"),
			"--set", "proof.keys[0].kid=k1",
			"--set", "proof.keys[0].secretName=fencegate-proof",
			"--set", "proof.keys[0].secretKey=seed"),
		"proofs, own authz certificate, proxies listed": with(
			"--set", "tokens[1].name=edge-proxy",
			"--set", "tokens[1].sha256="+strings.Repeat("ef", 32),
			"--set", "tokens[1].operations={check}",
			"--set", "proof.keys[0].kid=k1",
			"--set", "proof.keys[0].secretName=fencegate-proof",
			"--set", "proof.keys[0].secretKey=seed",
			"--set", "proof.verifyKeys[0].kid=k0",
			"--set", "proof.verifyKeys[0].publicKey="+strings.Repeat("A", 43),
			"--set", "authz.tls.certManager=false",
			"--set", "authz.tls.secretName=my-authz-tls",
			"--set", "check.maxWriteCap=1m",
			"--set", "networkPolicy.proxyNamespaces={ingress,mesh}",
			"--set", "ports.forwardAuth=8081"),
		"authz without TLS, webhook open": with(
			"--set", "authz.tls.enabled=false",
			"--set", "networkPolicy.webhookFrom=null",
			"--set", "networkPolicy.webhookOpen=true"),
		"no network policy": with("--set", "networkPolicy.enabled=false"),
		"single, own secret": {"--set", "replicas=1", "--set", "store.existingSecret=gate-store",
			"--set", "tokens[0].name=a", "--set", "tokens[0].sha256=" + strings.Repeat("cd", 32),
			"--set", "networkPolicy.webhookOpen=true"},
		"pinned image by hash": with("--set", "image.repository=registry.example/fencegate",
			"--set", "image.digest=sha256:"+strings.Repeat("0", 64)),
	}
}
