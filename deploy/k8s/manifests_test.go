package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"

	"github.com/fencegate/fencegate/admission"
	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/deploy/k8s"
)

// cert-manager's types are not in k8s.io/api, and importing cert-manager for
// them would pull in its whole dependency tree; these mirror the
// cert-manager.io/v1 fields the manifests use (a field we do not list fails
// the strict decode, so a typo cannot hide behind this).
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// newObject returns the typed object for a document's apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration":
		return &admissionregv1.ValidatingWebhookConfiguration{}, nil
	case "cert-manager.io/v1 Issuer":
		return &issuer{}, nil
	case "cert-manager.io/v1 Certificate":
		return &certificate{}, nil
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return &kustomization{}, nil
	}
	return nil, fmt.Errorf("no schema for apiVersion %q kind %q", apiVersion, kind)
}

// decodeDocs decodes every YAML document of data strictly: unknown or
// mis-cased fields and wrong types are errors, as the API server's strict
// field validation would report them.
func decodeDocs(name string, data []byte) ([]any, error) {
	var out []any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s doc %d: %w", name, i, err)
		}
		if doc == nil {
			continue
		}
		apiVersion, _ := doc["apiVersion"].(string)
		kind, _ := doc["kind"].(string)
		obj, err := newObject(apiVersion, kind)
		if err != nil {
			return nil, fmt.Errorf("%s doc %d: %w", name, i, err)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("%s doc %d: %w", name, i, err)
		}
		strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowUnknownFields)
		if err != nil {
			return nil, fmt.Errorf("%s doc %d (%s): %w", name, i, kind, err)
		}
		if len(strict) > 0 {
			return nil, fmt.Errorf("%s doc %d (%s): %v", name, i, kind, errors.Join(strict...))
		}
		out = append(out, obj)
	}
}

// manifests decodes every file and indexes the objects by kind/name.
type manifests struct {
	files map[string][]any
	byKey map[string]any
}

func load(t *testing.T) manifests {
	t.Helper()
	names, err := fs.Glob(k8s.Files, "*.yaml")
	if err != nil || len(names) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := manifests{files: map[string][]any{}, byKey: map[string]any{}}
	for _, n := range names {
		data, err := k8s.Files.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeDocs(n, data)
		if err != nil {
			t.Fatal(err)
		}
		m.files[n] = objs
		for _, o := range objs {
			var key string
			switch v := o.(type) {
			case *kustomization:
				key = "Kustomization/"
			case metav1.Object:
				key = kindOf(o) + "/" + v.GetName()
			}
			if _, dup := m.byKey[key]; dup {
				t.Fatalf("%s defined twice", key)
			}
			m.byKey[key] = o
		}
	}
	return m
}

func kindOf(o any) string { return strings.TrimPrefix(fmt.Sprintf("%T", o), "*") }

func get[T any](t *testing.T, m manifests, kind, name string) T {
	t.Helper()
	o, ok := m.byKey[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %q in the manifests", kind, name)
	}
	v, ok := o.(T)
	if !ok {
		t.Fatalf("%s %q is a %T", kind, name, o)
	}
	return v
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if len(m.byKey) < 12 {
		t.Fatalf("only %d objects decoded", len(m.byKey))
	}
	for key, o := range m.byKey {
		if obj, ok := o.(metav1.Object); ok && obj.GetLabels()["app.kubernetes.io/name"] != "fencegate" {
			t.Errorf("%s lacks the app.kubernetes.io/name label", key)
		}
	}
}

// The strict decode must actually reject mistakes, or the test above proves
// nothing.
func TestStrictDecodeCatchesMistakes(t *testing.T) {
	webhook, err := k8s.Files.ReadFile("webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	deployment, err := k8s.Files.ReadFile("deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := k8s.Files.ReadFile("pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file string
		orig       []byte
		from, to   string
	}{
		{"misspelt field", "webhook.yaml", webhook, "failurePolicy: Fail", "failurPolicy: Fail"},
		{"mis-cased field", "webhook.yaml", webhook, "timeoutSeconds: 5", "TimeoutSeconds: 5"},
		{"wrong type", "webhook.yaml", webhook, "timeoutSeconds: 5", "timeoutSeconds: five"},
		{"field at the wrong level", "deployment.yaml", deployment, "        runAsNonRoot: true", "        runAsNonRoot: true\n        readOnlyRootFilesystem: true"},
		{"unknown kind", "pdb.yaml", pdb, "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets"},
	}
	for _, tc := range cases {
		broken := strings.Replace(string(tc.orig), tc.from, tc.to, 1)
		if broken == string(tc.orig) {
			t.Fatalf("%s: %q not found in %s", tc.name, tc.from, tc.file)
		}
		if _, err := decodeDocs(tc.file, []byte(broken)); err == nil {
			t.Errorf("%s: broken %s decoded without error", tc.name, tc.file)
		}
	}
}

func TestWebhookConfiguration(t *testing.T) {
	m := load(t)
	vwc := get[*admissionregv1.ValidatingWebhookConfiguration](t, m, "v1.ValidatingWebhookConfiguration", "fencegate")
	if len(vwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(vwc.Webhooks))
	}
	w := vwc.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregv1.Fail {
		t.Error("failurePolicy must be Fail")
	}
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds < 1 || *w.TimeoutSeconds > 5 {
		t.Error("timeoutSeconds must be set, at most 5")
	}
	if w.SideEffects == nil || (*w.SideEffects != admissionregv1.SideEffectClassNone && *w.SideEffects != admissionregv1.SideEffectClassNoneOnDryRun) {
		t.Error("sideEffects must be None or NoneOnDryRun, so dry-run requests are sent")
	}
	if !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("admissionReviewVersions %v", w.AdmissionReviewVersions)
	}
	svc := w.ClientConfig.Service
	if svc == nil || svc.Path == nil || *svc.Path != admission.Path || w.ClientConfig.URL != nil {
		t.Fatalf("clientConfig %+v must name a service and path %s", w.ClientConfig, admission.Path)
	}

	// The service, its port and the container port behind it line up.
	s := get[*corev1.Service](t, m, "v1.Service", svc.Name)
	if s.Namespace != svc.Namespace {
		t.Errorf("webhook service namespace %q, service is in %q", svc.Namespace, s.Namespace)
	}
	var target intstr.IntOrString
	for _, p := range s.Spec.Ports {
		if svc.Port != nil && p.Port == *svc.Port {
			target = p.TargetPort
		}
	}
	dep := get[*appsv1.Deployment](t, m, "v1.Deployment", "fencegate")
	c := dep.Spec.Template.Spec.Containers[0]
	var containerPort int32
	for _, p := range c.Ports {
		if p.Name == target.StrVal {
			containerPort = p.ContainerPort
		}
	}
	if containerPort == 0 {
		t.Fatalf("service port %v targets %q, which is no container port", svc.Port, target.String())
	}
	cfg := loadConfig(t, m)
	if _, port, _ := net.SplitHostPort(cfg.Admission.Addr); port != fmt.Sprint(containerPort) {
		t.Errorf("admission listens on %s, the webhook port is %d", cfg.Admission.Addr, containerPort)
	}
	if !labelsMatch(s.Spec.Selector, dep.Spec.Template.Labels) {
		t.Error("the webhook service does not select the deployment's pods")
	}

	// The rules govern what the config governs.
	var ruled []string
	for _, r := range w.Rules {
		ops := map[admissionregv1.OperationType]bool{}
		for _, op := range r.Operations {
			ops[op] = true
		}
		if !ops[admissionregv1.Create] || !ops[admissionregv1.Update] || !ops[admissionregv1.Delete] {
			t.Errorf("rule %v must cover CREATE, UPDATE and DELETE", r.Resources)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				ruled = append(ruled, admission.Resource{Group: g, Resource: res}.String())
			}
		}
	}
	var configured []string
	for _, s := range cfg.Admission.Resources {
		r, err := admission.ParseResource(s)
		if err != nil {
			t.Fatal(err)
		}
		configured = append(configured, r.String())
	}
	slices.Sort(ruled)
	slices.Sort(configured)
	if !slices.Equal(ruled, configured) {
		t.Errorf("webhook rules govern %v, admission.resources %v", ruled, configured)
	}

	// The gateway's namespace is never sent (it must stay repairable).
	ns := get[*corev1.Namespace](t, m, "v1.Namespace", "fencegate")
	excluded := false
	for _, e := range w.NamespaceSelector.MatchExpressions {
		if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn &&
			slices.Contains(e.Values, ns.Name) && slices.Contains(e.Values, "kube-system") {
			excluded = true
		}
	}
	if !excluded {
		t.Error("namespaceSelector must exclude the fencegate namespace and kube-system")
	}

	// The opt-in condition tests the configured annotation names, on the
	// new and the old object.
	var optIn string
	for _, mc := range w.MatchConditions {
		if mc.Name == "opted-in" {
			optIn = mc.Expression
		}
	}
	for _, s := range []string{"'" + cfg.Admission.KeyAnnotation + "'", "'" + cfg.Admission.FenceAnnotation + "'", "oldObject", "object.metadata.annotations"} {
		if !strings.Contains(optIn, s) {
			t.Errorf("matchCondition opted-in lacks %s: %s", s, optIn)
		}
	}

	// cert-manager injects the CA of the certificate the pods serve.
	inject := vwc.Annotations["cert-manager.io/inject-ca-from"]
	cns, cname, _ := strings.Cut(inject, "/")
	cert := get[*certificate](t, m, "k8s_test.certificate", cname)
	if cert.Namespace != cns {
		t.Errorf("inject-ca-from %q, certificate in %q", inject, cert.Namespace)
	}
	want := svc.Name + "." + svc.Namespace + ".svc"
	if !slices.Contains(cert.Spec.DNSNames, want) {
		t.Errorf("certificate dnsNames %v lack %s", cert.Spec.DNSNames, want)
	}
	mounted := false
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the deployment does not mount the certificate's Secret %s", cert.Spec.SecretName)
	}
	ca := get[*issuer](t, m, "k8s_test.issuer", cert.Spec.IssuerRef.Name)
	if ca.Spec.CA == nil {
		t.Fatalf("issuer %s is not a CA issuer", ca.Name)
	}
	root := get[*certificate](t, m, "k8s_test.certificate", "fencegate-ca")
	if !root.Spec.IsCA || root.Spec.SecretName != ca.Spec.CA.SecretName {
		t.Error("the CA issuer's secret is not the CA certificate's")
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestDeploymentHardening(t *testing.T) {
	m := load(t)
	dep := get[*appsv1.Deployment](t, m, "v1.Deployment", "fencegate")
	pod := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Error("run at least two replicas: the webhook fails closed")
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod must set runAsNonRoot")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the gateway needs no API token: automountServiceAccountToken must be false")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container has no securityContext")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem must be true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation must be false")
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Error("capabilities must drop ALL")
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s probe must GET %s", name, want)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("set cpu/memory requests and a memory limit")
	}

	// The store URL comes from the Secret, by a key the Secret has.
	var ref *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == config.EnvName("store") && e.ValueFrom != nil {
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil {
		t.Fatal("FENCEGATE_STORE is not taken from a Secret")
	}
	sec := get[*corev1.Secret](t, m, "v1.Secret", ref.Name)
	if _, ok := sec.StringData[ref.Key]; !ok {
		t.Errorf("secret %s has no key %s", ref.Name, ref.Key)
	}

	// The config comes from the ConfigMap, mounted where --config points.
	var cmName string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := get[*corev1.ConfigMap](t, m, "v1.ConfigMap", cmName)
	if _, ok := cm.Data["config.yaml"]; !ok || !slices.Contains(c.Args, "/etc/fencegate/config.yaml") {
		t.Error("the config file is not wired from the ConfigMap to --config")
	}
	get[*policyv1.PodDisruptionBudget](t, m, "v1.PodDisruptionBudget", dep.Name)
}

// loadConfig runs the ConfigMap's config.yaml and the Secret's store URL
// through fencegate's own config loader and validator, with the TLS paths
// pointed at placeholder files (the validator checks they exist).
func loadConfig(t *testing.T, m manifests) config.Config {
	t.Helper()
	cm := get[*corev1.ConfigMap](t, m, "v1.ConfigMap", "fencegate-config")
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if err := cfg.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	cfg.Store = get[*corev1.Secret](t, m, "v1.Secret", "fencegate-store").StringData["store"]
	shipped := cfg.Admission.TLS
	for _, f := range []*string{&cfg.Admission.TLS.CertFile, &cfg.Admission.TLS.KeyFile} {
		*f = filepath.Join(dir, filepath.Base(*f))
		if err := os.WriteFile(*f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	shippedAuthz := cfg.Authz.TLS
	authzDir := filepath.Join(dir, "authz")
	if err := os.MkdirAll(authzDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*string{&cfg.Authz.TLS.CertFile, &cfg.Authz.TLS.KeyFile, &cfg.Authz.TLS.ClientCAFile} {
		if *f == "" {
			continue
		}
		*f = filepath.Join(authzDir, filepath.Base(*f))
		if err := os.WriteFile(*f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the ConfigMap's config is invalid: %v", err)
	}
	// serve builds the authenticator from the tokens; a digest Validate
	// accepts but the authenticator refuses would crash-loop the pods.
	var tokens []auth.Token
	for _, tok := range cfg.Tokens {
		sum, err := auth.ParseTokenHash(tok.SHA256)
		if err != nil {
			t.Fatalf("token %q: %v", tok.Name, err)
		}
		tokens = append(tokens, auth.Token{Name: tok.Name, SHA256: sum, Prefixes: tok.Prefixes, Operations: tok.Operations})
	}
	if _, err := auth.NewAuthenticator(tokens); err != nil {
		t.Fatalf("the ConfigMap's tokens would stop serve: %v", err)
	}
	cfg.Admission.TLS, cfg.Authz.TLS = shipped, shippedAuthz
	return cfg
}

func TestConfigMatchesDeployment(t *testing.T) {
	m := load(t)
	cfg := loadConfig(t, m)
	dep := get[*appsv1.Deployment](t, m, "v1.Deployment", "fencegate")
	c := dep.Spec.Template.Spec.Containers[0]
	var tlsMount, authzMount string
	for _, vm := range c.VolumeMounts {
		switch vm.Name {
		case "tls":
			tlsMount = vm.MountPath
		case "authz-tls":
			authzMount = vm.MountPath
		}
	}
	for _, f := range []string{cfg.Admission.TLS.CertFile, cfg.Admission.TLS.KeyFile} {
		if filepath.Dir(f) != tlsMount {
			t.Errorf("%s is not in the TLS mount %s", f, tlsMount)
		}
	}
	// The authz listener requires Envoy's client certificate (#19 item 14):
	// without it, anyone who reaches the port chooses route options.
	if cfg.Authz.TLS.ClientCAFile == "" {
		t.Error("authz.tls.clientCAFile is not set: the authz listener takes any caller")
	}
	for _, f := range []string{cfg.Authz.TLS.CertFile, cfg.Authz.TLS.KeyFile, cfg.Authz.TLS.ClientCAFile} {
		if filepath.Dir(f) != authzMount {
			t.Errorf("%s is not in the authz TLS mount %s", f, authzMount)
		}
	}
	if !cfg.Check.HideCurrentFence {
		t.Error("check.hideCurrentFence is off in the shipped manifests")
	}
	want := "system:serviceaccount:" + dep.Namespace + ":" + dep.Spec.Template.Spec.ServiceAccountName
	if cfg.Admission.ServiceAccount != want {
		t.Errorf("admission.serviceAccount %q, the pods run as %q", cfg.Admission.ServiceAccount, want)
	}
	get[*corev1.ServiceAccount](t, m, "v1.ServiceAccount", dep.Spec.Template.Spec.ServiceAccountName)
	if cfg.Admission.Mode != "enforce" || cfg.Admission.Policy != "holder" {
		t.Errorf("shipped admission mode/policy %s/%s", cfg.Admission.Mode, cfg.Admission.Policy)
	}
	// The probes' port is the HTTP listener's.
	_, port, _ := net.SplitHostPort(cfg.HTTP.Addr)
	for _, p := range c.Ports {
		if p.Name == c.ReadinessProbe.HTTPGet.Port.StrVal && fmt.Sprint(p.ContainerPort) != port {
			t.Errorf("probes hit port %d, http listens on %s", p.ContainerPort, cfg.HTTP.Addr)
		}
	}
}

func TestKustomizationListsEveryFile(t *testing.T) {
	m := load(t)
	k := m.byKey["Kustomization/"].(*kustomization)
	var files []string
	for n := range m.files {
		if n != "kustomization.yaml" {
			files = append(files, n)
		}
	}
	slices.Sort(files)
	listed := slices.Clone(k.Resources)
	slices.Sort(listed)
	if !slices.Equal(files, listed) {
		t.Errorf("kustomization lists %v, the directory has %v", listed, files)
	}
}

// The proxy label the NetworkPolicy admits to the edge ports.
const proxyLabel, proxyValue = "fencegate.io/proxy", "true"

// namesNamespaces reports whether a namespace selector admits only
// namespaces named by kubernetes.io/metadata.name (not {}, not a label
// anyone who can edit a namespace sets).
func namesNamespaces(ns *metav1.LabelSelector) bool {
	if len(ns.MatchLabels) > 0 || len(ns.MatchExpressions) == 0 {
		return false
	}
	for _, e := range ns.MatchExpressions {
		if e.Key != "kubernetes.io/metadata.name" || e.Operator != metav1.LabelSelectorOpIn || len(e.Values) == 0 {
			return false
		}
	}
	return true
}

// policyProblems lists how the NetworkPolicy fails the deployment: a port it
// names that the pods do not have, a container port no rule admits, the
// authz port open to anything but proxies, the webhook port restricted to
// pods (the API server is not one).
func policyProblems(np *networkingv1.NetworkPolicy, dep *appsv1.Deployment) []string {
	var out []string
	if !labelsMatch(np.Spec.PodSelector.MatchLabels, dep.Spec.Template.Labels) {
		out = append(out, "the policy does not select the deployment's pods")
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		out = append(out, "the policy does not restrict ingress")
	}
	names := map[string]bool{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		names[p.Name] = false
	}
	for i, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port == nil || p.Port.StrVal == "" {
				out = append(out, fmt.Sprintf("rule %d names a port by number, not by the container's port name", i))
				continue
			}
			name := p.Port.StrVal
			if _, ok := names[name]; !ok {
				out = append(out, fmt.Sprintf("rule %d admits port %q, which the pods do not have", i, name))
				continue
			}
			names[name] = true
			switch name {
			case "authz", "forward-auth":
				if len(r.From) == 0 {
					out = append(out, fmt.Sprintf("rule %d opens the authz port to everyone", i))
				}
				for _, peer := range r.From {
					if peer.PodSelector == nil || peer.PodSelector.MatchLabels[proxyLabel] != proxyValue || peer.IPBlock != nil {
						out = append(out, fmt.Sprintf("rule %d admits a non-proxy peer to the authz port", i))
					}
					// A pod label is anyone's who may create pods; the
					// namespace's name is the API server's to set.
					if ns := peer.NamespaceSelector; ns == nil || !namesNamespaces(ns) {
						out = append(out, fmt.Sprintf("rule %d admits proxies from any namespace to the authz port", i))
					}
				}
			case "webhook":
				for _, peer := range r.From {
					if peer.IPBlock == nil {
						out = append(out, fmt.Sprintf("rule %d admits the webhook port from pods only: the API server is not a pod", i))
					}
				}
			}
		}
	}
	for name, admitted := range names {
		if !admitted {
			out = append(out, fmt.Sprintf("no rule admits port %q", name))
		}
	}
	slices.Sort(out)
	return out
}

func TestNetworkPolicy(t *testing.T) {
	m := load(t)
	dep := get[*appsv1.Deployment](t, m, "v1.Deployment", "fencegate")
	np := get[*networkingv1.NetworkPolicy](t, m, "v1.NetworkPolicy", "fencegate")
	for _, p := range policyProblems(np, dep) {
		t.Error(p)
	}
	// And the check catches a policy that lets others reach the edge port.
	breaks := map[string]func(np *networkingv1.NetworkPolicy){
		"authz for lock clients": func(np *networkingv1.NetworkPolicy) {
			for i := range np.Spec.Ingress {
				if slices.ContainsFunc(np.Spec.Ingress[i].Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == "grpc" }) {
					authz := intstr.FromString("authz")
					np.Spec.Ingress[i].Ports = append(np.Spec.Ingress[i].Ports, networkingv1.NetworkPolicyPort{Port: &authz})
				}
			}
		},
		"proxy label dropped": func(np *networkingv1.NetworkPolicy) {
			for i := range np.Spec.Ingress {
				for j := range np.Spec.Ingress[i].From {
					if ps := np.Spec.Ingress[i].From[j].PodSelector; ps != nil {
						delete(ps.MatchLabels, proxyLabel)
					}
				}
			}
		},
		"webhook port dropped": func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress = slices.DeleteFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
				return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == "webhook" })
			})
		},
		"proxies from any namespace": func(np *networkingv1.NetworkPolicy) {
			for i := range np.Spec.Ingress {
				for j := range np.Spec.Ingress[i].From {
					if np.Spec.Ingress[i].From[j].PodSelector != nil {
						np.Spec.Ingress[i].From[j].NamespaceSelector = &metav1.LabelSelector{}
					}
				}
			}
		},
		"other pods selected": func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector.MatchLabels = map[string]string{"app": "other"}
		},
	}
	for name, brk := range breaks {
		b := np.DeepCopy()
		brk(b)
		if len(policyProblems(b, dep)) == 0 {
			t.Errorf("%s: the policy check found nothing wrong", name)
		}
	}
}
