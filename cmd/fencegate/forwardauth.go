package main

import (
	"errors"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/authz"
)

// authzOptions are the edge transports' options. With tokens (auth on),
// forward-auth answers only a caller presenting, in Proxy-Authorization, a
// token with the check operation, for the keys its prefixes cover. Callers
// from loopback are trusted as the operator's proxy, as the lock API
// trusts them without tokens; beyond loopback, an ext_authz/ext_proc
// caller is trusted only with a client certificate the authz listener
// verified (authz.tls.clientCAFile).
func authzOptions(auth *api.Authenticator, o authz.Options) authz.Options {
	o.TrustLoopback = true
	if auth != nil {
		o.Authenticate = forwardAuthCredential(auth)
	}
	return o
}

// forwardAuthCredential checks a forward-auth credential against the
// gateway's tokens.
func forwardAuthCredential(auth *api.Authenticator) func(string) (authz.KeyScope, error) {
	return func(credential string) (authz.KeyScope, error) {
		p, err := auth.Authenticate(credential)
		if err != nil {
			return nil, errors.Join(authz.ErrUnauthenticated, err)
		}
		if !p.CanDo(api.OpCheck) {
			return nil, authz.ErrForbidden
		}
		return p.CanUseKey, nil
	}
}
