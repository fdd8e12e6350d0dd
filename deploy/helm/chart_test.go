package helm_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/helm"
	"github.com/fencegate/fencegate/internal/testutil"
)

var (
	required = helm.Required
	variants = helm.Variants()
	caPEM    = helm.VariantCAPEM
)

func TestBuildScriptVersionMatches(t *testing.T) {
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION=(\S+)$`).FindSubmatch(script)
	if m == nil || string(m[1]) != helm.Version {
		t.Errorf("build.sh sets HELM_VERSION=%s, helm.go says %s", m, helm.Version)
	}
}

func TestMissingBinaryNamesMakeTest(t *testing.T) {
	t.Setenv("FENCEGATE_CACHE", t.TempDir())
	_, err := helm.Binary()
	if err == nil || !strings.Contains(err.Error(), "make test") || !strings.Contains(err.Error(), "deploy/helm/build.sh") {
		t.Fatalf("Binary() in an empty cache: %v; want an error naming make test and build.sh", err)
	}
}

func TestLint(t *testing.T) {
	testutil.NeedService(t, "helm (make helm-bin)")
	for name, args := range variants {
		t.Run(name, func(t *testing.T) {
			out, err := helm.Run(context.Background(), append([]string{"lint", "--strict", helm.ChartDir()}, args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// Values the gateway cannot run with fail the render (helm install), not
// the pods later.
func TestRenderRefuses(t *testing.T) {
	testutil.NeedService(t, "helm (make helm-bin)")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no store": {[]string{"--set", "tokens[0].name=a", "--set", "tokens[0].sha256=" + strings.Repeat("ab", 32)}, "store.url"},
		// values.schema.json:
		"token digest not hex":   {append(slices.Clone(required), "--set", "tokens[0].sha256=ab"), "/tokens/0/sha256"},
		"unknown operation":      {append(slices.Clone(required), "--set", "tokens[0].operations={acquire,delete}"), "/tokens/0/operations/1"},
		"misspelt mode":          {append(slices.Clone(required), "--set", "admission.mode=enforced"), "/admission/mode"},
		"fail open not a policy": {append(slices.Clone(required), "--set", "admission.failurePolicy=Open"), "/admission/failurePolicy"},
		"zero replicas":          {append(slices.Clone(required), "--set", "replicas=0"), "/replicas"},
		"no tokens":              {[]string{"--set", "store.url=redis://r:6379"}, "set tokens"},
		"token without digest":   {[]string{"--set", "store.url=redis://r:6379", "--set", "tokens[0].name=a"}, "sha256"},
		"no cert-manager, no CA": {append(slices.Clone(required), "--set", "admission.certificates.certManager=false",
			"--set", "admission.certificates.secretName=x"), "caBundle"},
		// Secure defaults the operator must answer, not silently open.
		"webhook port open by default":    {slices.Clone(required[:len(required)-2]), "networkPolicy.webhookFrom"},
		"authz TLS without a certificate": {append(slices.Clone(required), "--set", "authz.tls.certManager=false"), "authz.tls.secretName"},
		"old proxy namespace selector":    {append(slices.Clone(required), "--set", "networkPolicy.proxyNamespaceSelector.x=y"), "proxyNamespaceSelector"},
		"proof key without its Secret":    {append(slices.Clone(required), "--set", "proof.keys[0].kid=k1"), "/proof/keys/0"},
		"unknown check setting":           {append(slices.Clone(required), "--set", "check.hideCurentFence=true"), "hideCurentFence"},
		"misspelt route field":            {append(slices.Clone(required), "--set", "routes[0].name=a", "--set", "routes[0].mach.hosts={x}"), "mach"},
		"route without a name":            {append(slices.Clone(required), "--set", "routes[0].key=a"), "/routes/0"},
		"unknown route path type":         {append(slices.Clone(required), "--set", "routes[0].name=a", "--set", "routes[0].match.path.type=Regex"), "/routes/0/match/path/type"},
		// The gateway refuses to start with it (config.ProofKeyProblems).
		"signed proofs without a key": {append(slices.Clone(required), "--set", "routes[0].name=orders", "--set", "routes[0].key=orders",
			"--set", "routes[0].proof=signed"), "routes entry orders has proof: signed"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := helm.Template(context.Background(), "fencegate", "fencegate", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v; want an error about %s", err, tc.want)
			}
		})
	}
}

// rendered is one rendering, its documents by kind/name.
type rendered map[string]map[string]any

func render(t *testing.T, release, namespace string, args ...string) rendered {
	testutil.NeedService(t, "helm (make helm-bin)")
	t.Helper()
	out, err := helm.Template(context.Background(), release, namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc == nil {
			continue
		}
		md, _ := doc["metadata"].(map[string]any)
		key := doc["kind"].(string) + "/" + md["name"].(string)
		if _, dup := r[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		r[key] = doc
	}
}

// as converts the document key into a typed object.
func as[T any](t *testing.T, r rendered, key string) *T {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		t.Fatalf("no %s rendered (have %v)", key, r.keys())
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func (r rendered) keys() []string {
	var k []string
	for key := range r {
		k = append(k, key)
	}
	slices.Sort(k)
	return k
}

// loadConfig runs the rendered ConfigMap's config.yaml through fencegate's
// own loader and validator (with the store URL and TLS files it would get).
func loadConfig(t *testing.T, r rendered, cmKey string) config.Config {
	t.Helper()
	cm := as[corev1.ConfigMap](t, r, cmKey)
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if err := cfg.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	cfg.Store = "redis://redis:6379/0"
	shipped, shippedAuthz := cfg.Admission.TLS, cfg.Authz.TLS
	for i, tc := range []*config.TLS{&cfg.Admission.TLS, &cfg.Authz.TLS} {
		if tc.CertFile == "" {
			continue
		}
		sub := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []*string{&tc.CertFile, &tc.KeyFile, &tc.ClientCAFile} {
			if *f == "" {
				continue
			}
			*f = filepath.Join(sub, filepath.Base(*f))
			if err := os.WriteFile(*f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	shippedProof := slices.Clone(cfg.Proof.Keys)
	for i := range cfg.Proof.Keys {
		// A seed where the Secret volume would put it.
		f := filepath.Join(dir, fmt.Sprintf("seed-%d", i))
		if err := os.WriteFile(f, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Proof.Keys[i].PrivateKeyFile = f
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the rendered config is invalid: %v", err)
	}
	cfg.Admission.TLS, cfg.Authz.TLS, cfg.Proof.Keys = shipped, shippedAuthz, shippedProof
	return cfg
}

func TestVariants(t *testing.T) {
	t.Run("provided CA", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["provided CA"]...)
		vwc := as[admissionregv1.ValidatingWebhookConfiguration](t, r, "ValidatingWebhookConfiguration/fencegate")
		if string(vwc.Webhooks[0].ClientConfig.CABundle) != caPEM || vwc.Annotations["cert-manager.io/inject-ca-from"] != "" {
			t.Errorf("caBundle %q, annotations %v: want the provided CA and no injection", vwc.Webhooks[0].ClientConfig.CABundle, vwc.Annotations)
		}
		for _, k := range r.keys() {
			if strings.HasPrefix(k, "Certificate/") || strings.HasPrefix(k, "Issuer/") {
				t.Errorf("%s rendered without cert-manager", k)
			}
		}
		dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
		if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "my-webhook-tls"
		}) {
			t.Error("the provided TLS Secret is not mounted")
		}
		loadConfig(t, r, "ConfigMap/fencegate-config")
	})

	t.Run("proofs, own authz certificate, proxies listed", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["proofs, own authz certificate, proxies listed"]...)
		cfg := loadConfig(t, r, "ConfigMap/fencegate-config")
		if cfg.Authz.TLS.CertFile == "" || cfg.Authz.TLS.ClientCAFile == "" {
			t.Errorf("authz.tls %+v: want a certificate and a client CA", cfg.Authz.TLS)
		}
		if len(cfg.Proof.Keys) != 1 || cfg.Proof.Keys[0].KID != "k1" || len(cfg.Proof.VerifyKeys) != 1 {
			t.Errorf("proof %+v", cfg.Proof)
		}
		if !cfg.Check.HideCurrentFence || cfg.Check.MaxWriteCap.Std() != time.Minute {
			t.Errorf("check %+v", cfg.Check)
		}
		dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
		c := dep.Spec.Template.Spec.Containers[0]
		mounted := func(file, secret string) bool {
			for _, vm := range c.VolumeMounts {
				if filepath.Dir(file) != vm.MountPath {
					continue
				}
				for _, v := range dep.Spec.Template.Spec.Volumes {
					if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == secret {
						return true
					}
				}
			}
			return false
		}
		if !mounted(cfg.Authz.TLS.ClientCAFile, "my-authz-tls") || !mounted(cfg.Proof.Keys[0].PrivateKeyFile, "fencegate-proof") {
			t.Errorf("the authz certificate or the proof seed is not mounted from its Secret: %+v %+v", c.VolumeMounts, cfg.Proof.Keys)
		}
		for _, k := range r.keys() {
			if strings.HasPrefix(k, "Certificate/fencegate-authz") {
				t.Errorf("%s rendered with the operator's own authz certificate", k)
			}
		}
		if cfg.Authz.HTTP.Addr != ":8081" {
			t.Errorf("authz.http.addr %q, want forward-auth on :8081", cfg.Authz.HTTP.Addr)
		}
		np := as[networkingv1.NetworkPolicy](t, r, "NetworkPolicy/fencegate")
		for _, rule := range np.Spec.Ingress {
			edge := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
				return p.Port.StrVal == "authz" || p.Port.StrVal == "forward-auth"
			})
			if !edge {
				continue
			}
			for _, p := range rule.Ports {
				if p.Port.StrVal != "authz" && p.Port.StrVal != "forward-auth" {
					t.Errorf("the proxies' rule also admits %s", p.Port.StrVal)
				}
			}
			for _, peer := range rule.From {
				if peer.NamespaceSelector == nil || len(peer.NamespaceSelector.MatchExpressions) != 1 ||
					!slices.Equal(peer.NamespaceSelector.MatchExpressions[0].Values, []string{"ingress", "mesh"}) {
					t.Errorf("authz peer %+v: want the namespaces ingress and mesh", peer)
				}
			}
		}
	})

	t.Run("monitored, narrowed", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["monitored, narrowed"]...)
		sm := r["ServiceMonitor/fencegate"]
		if sm == nil {
			t.Fatal("no ServiceMonitor")
		}
		svc := as[corev1.Service](t, r, "Service/fencegate")
		ep := sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep["port"] }) || ep["path"] != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %v does not scrape a port of the Service", ep)
		}
		np := as[networkingv1.NetworkPolicy](t, r, "NetworkPolicy/fencegate")
		var webhookPeers []networkingv1.NetworkPolicyPeer
		var lockNamespaces []string
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				switch p.Port.StrVal {
				case "webhook":
					webhookPeers = rule.From
				case "grpc":
					for _, peer := range rule.From {
						for _, e := range peer.NamespaceSelector.MatchExpressions {
							lockNamespaces = append(lockNamespaces, e.Values...)
						}
					}
				}
			}
		}
		if len(webhookPeers) != 1 || webhookPeers[0].IPBlock == nil || webhookPeers[0].IPBlock.CIDR != "10.0.0.0/24" {
			t.Errorf("webhook peers %+v, want the ipBlock 10.0.0.0/24", webhookPeers)
		}
		if !slices.Equal(lockNamespaces, []string{"shop", "billing"}) {
			t.Errorf("lock API namespaces %v", lockNamespaces)
		}
		cfg := loadConfig(t, r, "ConfigMap/fencegate-config")
		if !slices.Equal(cfg.Admission.Resources, []string{"deployments.apps", "statefulsets.apps"}) {
			t.Errorf("admission.resources %v, want the webhook rules'", cfg.Admission.Resources)
		}
	})

	t.Run("route table", func(t *testing.T) {
		// The chart's routes reach the gateway's config as the table says
		// (the one deploy/mesh generates the meshes' configuration from);
		// without routes, the config has none.
		r := render(t, "fencegate", "fencegate", variants["route table"]...)
		got := loadConfig(t, r, "ConfigMap/fencegate-config").Routes
		want := config.Default()
		if err := want.LoadFile(filepath.Join("..", "mesh", "routes.yaml")); err != nil {
			t.Fatal(err)
		}
		if len(want.Routes) == 0 || !reflect.DeepEqual(got, want.Routes) {
			t.Errorf("routes in the ConfigMap:\n%+v\nwant deploy/mesh/routes.yaml's:\n%+v", got, want.Routes)
		}
		minimal := render(t, "fencegate", "fencegate", variants["minimal"]...)
		cm := as[corev1.ConfigMap](t, minimal, "ConfigMap/fencegate-config")
		if strings.Contains(cm.Data["config.yaml"], "routes:") {
			t.Errorf("routes rendered from the default (empty) list:\n%s", cm.Data["config.yaml"])
		}
	})

	t.Run("no admission", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["no admission"]...)
		for _, k := range []string{"ValidatingWebhookConfiguration/fencegate", "Service/fencegate-webhook", "Certificate/fencegate-webhook"} {
			if r[k] != nil {
				t.Errorf("%s rendered with admission disabled", k)
			}
		}
		dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
		for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
			if p.Name == "webhook" {
				t.Error("the webhook port is declared with admission disabled")
			}
		}
		if cfg := loadConfig(t, r, "ConfigMap/fencegate-config"); cfg.Admission.Enabled() {
			t.Error("admission is enabled in the config")
		}
	})

	t.Run("single, own secret", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["single, own secret"]...)
		if r["PodDisruptionBudget/fencegate"] != nil {
			t.Error("a PDB with minAvailable 1 over one replica would block every drain")
		}
		if r["Secret/fencegate-store"] != nil {
			t.Error("the chart renders a store Secret next to an existing one")
		}
		dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
		ref := dep.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef
		if ref.Name != "gate-store" || ref.Key != "store" {
			t.Errorf("FENCEGATE_STORE from %s/%s", ref.Name, ref.Key)
		}
	})

	t.Run("pinned image by hash", func(t *testing.T) {
		r := render(t, "fencegate", "fencegate", variants["pinned image by hash"]...)
		dep := as[appsv1.Deployment](t, r, "Deployment/fencegate")
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != "registry.example/fencegate:v0.1.0@sha256:"+strings.Repeat("0", 64) {
			t.Errorf("image %s", img)
		}
	})

	// Another release name and namespace: every cross-reference follows.
	t.Run("renamed release", func(t *testing.T) {
		r := render(t, "gate", "ops", required...)
		dep := as[appsv1.Deployment](t, r, "Deployment/gate-fencegate")
		cfg := loadConfig(t, r, "ConfigMap/gate-fencegate-config")
		if want := "system:serviceaccount:ops:" + dep.Spec.Template.Spec.ServiceAccountName; cfg.Admission.ServiceAccount != want {
			t.Errorf("admission.serviceAccount %s, pods run as %s", cfg.Admission.ServiceAccount, want)
		}
		vwc := as[admissionregv1.ValidatingWebhookConfiguration](t, r, "ValidatingWebhookConfiguration/gate-fencegate")
		svc := vwc.Webhooks[0].ClientConfig.Service
		as[corev1.Service](t, r, "Service/"+svc.Name)
		cert := r["Certificate/gate-fencegate-webhook"]
		if cert == nil {
			t.Fatal("no serving certificate")
		}
		dns := cert["spec"].(map[string]any)["dnsNames"].([]any)
		if svc.Namespace != "ops" || dns[0] != svc.Name+".ops.svc" {
			t.Errorf("webhook service %s/%s, certificate names %v", svc.Namespace, svc.Name, dns)
		}
		if vwc.Annotations["cert-manager.io/inject-ca-from"] != "ops/gate-fencegate-webhook" {
			t.Errorf("inject-ca-from %q", vwc.Annotations["cert-manager.io/inject-ca-from"])
		}
		excluded := vwc.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values
		if !slices.Contains(excluded, "ops") || !slices.Contains(excluded, "kube-system") {
			t.Errorf("webhook excludes %v, want the release namespace and kube-system", excluded)
		}
		for k, doc := range r {
			md := doc["metadata"].(map[string]any)
			if ns, ok := md["namespace"]; ok && ns != "ops" {
				t.Errorf("%s in namespace %v", k, ns)
			}
		}
	})
}

// TestRoutesSchemaMatchesConfig: values.schema.json's route entry lists
// exactly config.Route's (and RouteMatch's, RoutePath's) fields, so the
// schema neither refuses a field the gateway takes nor lets a misspelt one
// through to a config the gateway would refuse at start.
func TestRoutesSchemaMatchesConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(helm.ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	var schema node
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	var props func(json.RawMessage) map[string]json.RawMessage
	props = func(msg json.RawMessage) map[string]json.RawMessage {
		var n node
		if err := json.Unmarshal(msg, &n); err != nil {
			t.Fatal(err)
		}
		if n.Items != nil {
			return props(n.Items)
		}
		return n.Properties
	}
	tags := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("yaml"), ",")
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	keys := func(m map[string]json.RawMessage) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	route := props(schema.Properties["routes"])
	match := props(route["match"])
	for _, c := range []struct {
		what   string
		schema []string
		config []string
	}{
		{"routes[]", keys(route), tags(config.Route{})},
		{"routes[].match", keys(match), tags(config.RouteMatch{})},
		{"routes[].match.path", keys(props(match["path"])), tags(config.RoutePath{})},
	} {
		if !slices.Equal(c.schema, c.config) {
			t.Errorf("values.schema.json %s has %v; config has %v", c.what, c.schema, c.config)
		}
	}
}

// TestControllerProofSigning: the FencePolicy controller is told the
// gateways have a proof key (--proof-signing) exactly when proof.keys or
// proof.verifyKeys is non-empty; without it a policy with proof: signed is
// Invalid rather than published into a table the gateways refuse to start
// with.
func TestControllerProofSigning(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"no keys", nil, false},
		{"a signing key", []string{"--set", "proof.keys[0].kid=k1", "--set", "proof.keys[0].secretName=fencegate-proof", "--set", "proof.keys[0].secretKey=seed"}, true},
		{"a verify key", []string{"--set", "proof.verifyKeys[0].kid=k0", "--set", "proof.verifyKeys[0].publicKey=" + strings.Repeat("A", 43)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(slices.Clone(helm.Required), "--set", "fencePolicy.enabled=true")
			r := render(t, "fencegate", "fencegate", append(args, tc.args...)...)
			dep := as[appsv1.Deployment](t, r, "Deployment/fencegate-controller")
			got := dep.Spec.Template.Spec.Containers[0].Args
			if has := slices.Contains(got, "--proof-signing"); has != tc.want {
				t.Errorf("--proof-signing in %v: %v, want %v", got, has, tc.want)
			}
		})
	}
}
