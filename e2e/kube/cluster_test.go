package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/e2e/kube"
)

// Identities the API server authenticates by static token (--token-auth-file).
const (
	adminUser      = "admin"                  // system:masters
	writerUser     = "order-writer"           // an ordinary client
	oncallUser     = "oncall@example.com"     // exempt in the webhook's options
	breakGlassUser = "breakglass@example.com" // in fencegate.io:breakglass: never sent
)

// cluster is a running etcd + kube-apiserver on loopback.
type cluster struct {
	url    string            // https://127.0.0.1:PORT
	tokens map[string]string // user → bearer token
	client *http.Client      // trusts the API server's CA
}

// startCluster starts etcd and kube-apiserver (kube.Start) with static
// token authentication for the identities above and AlwaysAllow
// authorization: the webhook, not RBAC, is under test.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	a := kube.Start(t, []kube.User{
		{Name: adminUser, Groups: "system:masters"},
		{Name: writerUser, Groups: "shop-writers"},
		{Name: oncallUser, Groups: "oncall"},
		{Name: breakGlassUser, Groups: "fencegate.io:breakglass"},
	})
	return &cluster{url: a.URL, tokens: a.Tokens, client: a.Client}
}

// do sends one request as user and returns the status and body.
func (c *cluster) do(ctx context.Context, user, method, path string, body any, contentType string) (int, []byte, error) {
	code, b, _, err := c.doHeader(ctx, user, method, path, body, contentType)
	return code, b, err
}

// doHeader is do, also returning the response headers.
func (c *cluster) doHeader(ctx context.Context, user, method, path string, body any, contentType string) (int, []byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return 0, nil, nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.tokens[user])
	req.Header.Set("Accept", "application/json")
	if rd != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}
