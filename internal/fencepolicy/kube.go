package fencepolicy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// A small REST client over the API server's JSON: list, get, create,
// update (with the resourceVersion read: optimistic concurrency) and
// delete. client-go is not used on purpose: the controller needs eight
// calls, and the module stays free of client-go's dependency tree.

// resource is one REST resource the controller touches.
type resource struct {
	group, version, plural string
	namespaced             bool
}

var (
	rFencePolicy         = resource{"fencegate.io", "v1alpha1", "fencepolicies", true}
	rHTTPRoute           = resource{"gateway.networking.k8s.io", "v1", "httproutes", true}
	rGateway             = resource{"gateway.networking.k8s.io", "v1", "gateways", true}
	rGatewayClass        = resource{"gateway.networking.k8s.io", "v1", "gatewayclasses", false}
	rSecurityPolicy      = resource{"gateway.envoyproxy.io", "v1alpha1", "securitypolicies", true}
	rExtensionPolicy     = resource{"gateway.envoyproxy.io", "v1alpha1", "envoyextensionpolicies", true}
	rAuthorizationPolicy = resource{"security.istio.io", "v1", "authorizationpolicies", true}
	rConfigMap           = resource{"", "v1", "configmaps", true}
)

// Permission is one RBAC rule line: a verb on a group's resource
// (subresources as "resource/sub").
type Permission struct{ Group, Resource, Verb string }

// ClusterPermissions are every cluster-wide call the controller makes, and
// NamespacePermissions those in its own namespace (the published
// ConfigMap). The client refuses any call not listed here, and the chart's
// ClusterRole and Role grant exactly these (a test compares them).
var (
	ClusterPermissions = []Permission{
		{"fencegate.io", "fencepolicies", "list"},
		{"fencegate.io", "fencepolicies/status", "update"},
		{"gateway.networking.k8s.io", "httproutes", "list"},
		{"gateway.networking.k8s.io", "httproutes/status", "update"},
		{"gateway.networking.k8s.io", "gateways", "list"},
		{"gateway.networking.k8s.io", "gatewayclasses", "list"},
		{"gateway.envoyproxy.io", "securitypolicies", "list"},
		{"gateway.envoyproxy.io", "securitypolicies", "create"},
		{"gateway.envoyproxy.io", "securitypolicies", "update"},
		{"gateway.envoyproxy.io", "securitypolicies", "delete"},
		{"gateway.envoyproxy.io", "envoyextensionpolicies", "list"},
		{"gateway.envoyproxy.io", "envoyextensionpolicies", "create"},
		{"gateway.envoyproxy.io", "envoyextensionpolicies", "update"},
		{"gateway.envoyproxy.io", "envoyextensionpolicies", "delete"},
		{"security.istio.io", "authorizationpolicies", "list"},
		{"security.istio.io", "authorizationpolicies", "create"},
		{"security.istio.io", "authorizationpolicies", "update"},
		{"security.istio.io", "authorizationpolicies", "delete"},
	}
	NamespacePermissions = []Permission{
		{"", "configmaps", "get"},
		{"", "configmaps", "create"},
		{"", "configmaps", "update"},
	}
)

// Kube is the API server connection.
type Kube struct {
	URL       string
	TokenFile string // re-read on every call: bound service-account tokens rotate
	HTTP      *http.Client
	// Namespace is the controller's own (where it publishes).
	Namespace string

	// used records every permission exercised (tests compare it with the
	// declared ones).
	mu   sync.Mutex
	used map[Permission]bool
}

// Default service-account locations inside a pod.
const (
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// InCluster builds a Kube from the pod's service account, with url,
// tokenFile and caFile overriding (for running outside a cluster).
func InCluster(rawURL, tokenFile, caFile, namespace string) (*Kube, error) {
	if rawURL == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("fencepolicy: not in a cluster (KUBERNETES_SERVICE_HOST unset): give --kube-url")
		}
		rawURL = "https://" + strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") + ":" + port
		if strings.Contains(host, ":") {
			rawURL = "https://[" + host + "]:" + port
		}
	}
	if tokenFile == "" {
		tokenFile = saDir + "/token"
	}
	if caFile == "" {
		caFile = saDir + "/ca.crt"
	}
	if namespace == "" {
		b, err := os.ReadFile(saDir + "/namespace")
		if err != nil {
			return nil, fmt.Errorf("fencepolicy: the controller's namespace: give --namespace: %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("fencepolicy: API server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("fencepolicy: API server CA %s: no certificate", caFile)
	}
	return &Kube{URL: rawURL, TokenFile: tokenFile, Namespace: namespace, HTTP: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}}, nil
}

// StatusError is a call the API server answered with an error status.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("API server answered %d: %.300s", e.Code, e.Body)
}

// IsStatus reports whether err is the API server's answer code.
func IsStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

func (r resource) path(ns, name, sub string) string {
	p := "/apis/" + r.group + "/" + r.version
	if r.group == "" {
		p = "/api/" + r.version
	}
	if r.namespaced && ns != "" {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	p += "/" + r.plural
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	if sub != "" {
		p += "/" + sub
	}
	return p
}

func (k *Kube) call(ctx context.Context, verb string, r resource, ns, name, sub, query string, in, out any) error {
	perm := Permission{r.group, r.plural, verb}
	if sub != "" {
		perm.Resource += "/" + sub
	}
	if !declared(perm) {
		// A call the chart's RBAC does not grant would fail in a cluster:
		// fail here, in every test, instead.
		return fmt.Errorf("fencepolicy: %s %s/%s is not in the declared permissions", verb, r.group, perm.Resource)
	}
	k.mu.Lock()
	if k.used == nil {
		k.used = map[Permission]bool{}
	}
	k.used[perm] = true
	k.mu.Unlock()
	method := map[string]string{"list": http.MethodGet, "get": http.MethodGet, "create": http.MethodPost, "update": http.MethodPut, "delete": http.MethodDelete}[verb]
	target := k.URL + r.path(ns, name, sub)
	if query != "" {
		target += "?" + query
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(k.TokenFile)
	if err != nil {
		return fmt.Errorf("fencepolicy: token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("fencepolicy: %s %s: %w", verb, r.path(ns, name, sub), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("fencepolicy: %s %s: %w", verb, r.path(ns, name, sub), err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("fencepolicy: %s %s: %w", verb, r.path(ns, name, sub), &StatusError{resp.StatusCode, string(raw)})
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("fencepolicy: %s %s: %w", verb, r.path(ns, name, sub), err)
		}
	}
	return nil
}

func declared(p Permission) bool {
	for _, d := range ClusterPermissions {
		if d == p {
			return true
		}
	}
	for _, d := range NamespacePermissions {
		if d == p {
			return true
		}
	}
	return false
}

// Used returns the permissions exercised so far.
func (k *Kube) Used() []Permission {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []Permission
	for p := range k.used {
		out = append(out, p)
	}
	return out
}

// list returns the raw items of r in every namespace (labelSelector may be
// empty). A resource the API server does not serve (its CRD is not
// installed: 404) is an empty list and served=false.
func (k *Kube) list(ctx context.Context, r resource, labelSelector string) (items []json.RawMessage, served bool, err error) {
	q := url.Values{}
	if labelSelector != "" {
		q.Set("labelSelector", labelSelector)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := k.call(ctx, "list", r, "", "", "", q.Encode(), nil, &l); err != nil {
		if IsStatus(err, http.StatusNotFound) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return l.Items, true, nil
}
