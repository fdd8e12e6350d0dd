package kube_test

import (
	"context"
	"encoding/json"
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
type cluster struct{ *kube.APIServer }

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
	return &cluster{a}
}

// do sends one request as user and returns the status and body.
func (c *cluster) do(ctx context.Context, user, method, path string, body any, contentType string) (int, []byte, error) {
	code, b, _, err := c.doHeader(ctx, user, method, path, body, contentType)
	return code, b, err
}

// doHeader is do, also returning the response headers. A body that is
// not []byte is sent as JSON.
func (c *cluster) doHeader(ctx context.Context, user, method, path string, body any, contentType string) (int, []byte, http.Header, error) {
	var b []byte
	if body != nil {
		var ok bool
		if b, ok = body.([]byte); !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return 0, nil, nil, err
			}
		}
	}
	return c.Do(ctx, user, method, path, b, contentType)
}
