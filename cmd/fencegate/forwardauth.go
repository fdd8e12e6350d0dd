package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/internal/connlimit"
	"github.com/fencegate/fencegate/internal/serving"
	"github.com/fencegate/fencegate/lockserver"
)

// authzOptions are the edge transports' options. With tokens (auth on),
// forward-auth answers only a caller presenting, in Proxy-Authorization, a
// token with the check operation, for the keys its prefixes cover. An
// ext_authz/ext_proc caller is trusted only with a client certificate the
// authz listener verified (authz.tls.clientCAFile), or, with
// check.trustLoopback (off by default: behind a sidecar every inbound
// caller is loopback), from a loopback address other than 127.0.0.6.
func authzOptions(authn *auth.Authenticator, trustLoopback bool, o authz.Options) authz.Options {
	o.TrustLoopback = trustLoopback
	if authn != nil {
		o.Authenticate = forwardAuthCredential(authn)
	}
	return o
}

// forwardAuthCredential checks a forward-auth credential against the
// gateway's tokens.
func forwardAuthCredential(authn *auth.Authenticator) func(string) (authz.KeyScope, error) {
	return func(credential string) (authz.KeyScope, error) {
		p, err := authn.Authenticate(credential)
		if err != nil {
			return nil, errors.Join(authz.ErrUnauthenticated, err)
		}
		if !p.CanDo(auth.OpCheck) {
			return nil, authz.ErrForbidden
		}
		return p.CanUseKey, nil
	}
}

// mountForwardAuth serves forward-auth at authz.HTTPPath and below, behind
// the access log, reading no request body.
func mountForwardAuth(mux *http.ServeMux, srv *lockserver.Server, checker *fencecheck.Checker, ao authz.Options) {
	fwd := serving.Bodiless(srv.Middleware(authz.NewHTTPHandler(checker, ao)))
	mux.Handle(authz.HTTPPath, fwd)
	mux.Handle(authz.HTTPPath+"/", fwd)
}

// newForwardAuthRunner builds forward-auth's own listener (authz.http):
// /v1/authz/check and nothing else, so that the proxies' port can be told
// apart from the lock clients' (a NetworkPolicy, a firewall) and the lock
// API's port need not admit them.
func newForwardAuthRunner(l config.Listener, conns connlimit.Limits, srv *lockserver.Server, checker *fencecheck.Checker, ao authz.Options, log *slog.Logger, goBG func(func(context.Context))) (*serving.HTTPRunner, error) {
	tc, _, err := serving.ServerTLS("authz-http", l.TLS, log, goBG)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mountForwardAuth(mux, srv, checker, ao)
	return serving.NewHTTP("authz-http", l.Addr, tc, mux, serving.ReadTimeout, conns, log)
}
