package authz

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"

	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"
)

// HeaderCredential carries a forward-auth caller's credential ("Bearer
// <token>") when Options.Authenticate is set. It is Proxy-Authorization,
// not Authorization: nginx, Caddy and Traefik hand the client's own
// Authorization to the auth request, and a client's credential for the
// protected API must never be mistaken for (or need to be) the proxy's.
const HeaderCredential = "Proxy-Authorization"

// KeyScope reports whether an authenticated forward-auth caller may check
// key (NFC-normalised, as lockstore.NormalizeKey returns it).
type KeyScope func(key string) bool

// Forward-auth credential failures, for Options.Authenticate to return
// (wrapped or not): ErrUnauthenticated is answered 401 (no credential, or
// not a valid one), ErrForbidden 403 (valid, but not for forward-auth).
var (
	ErrUnauthenticated = errors.New("authz: forward-auth needs a valid credential in " + HeaderCredential)
	ErrForbidden       = errors.New("authz: this credential may not call forward-auth")
)

// errKeyOutOfScope: an authenticated forward-auth caller asked about a key
// its credential does not cover. Answered 403 without a store read or an
// audit event.
var errKeyOutOfScope = errors.New("authz: the credential has no scope for this key")

// caller is who asks, as the transport established it.
type caller struct {
	// trusted: the caller is authenticated as the operator's proxy (a
	// verified client certificate on the authz listener, a forward-auth
	// token with the check operation, or, with Options.TrustLoopback, a
	// loopback peer), so its route options may reach state that outlives
	// the request (the write barrier). A route table in the gateway's own
	// configuration (#20) is the other trusted source.
	trusted bool
	// scope bounds the keys a write may name; nil: every key.
	scope KeyScope
}

// grpcCaller is the caller of a gRPC stream or call: trusted when its
// connection presented a client certificate the listener verified (the
// authz listener's tls.clientCAFile), or, with trustLoopback, when it
// comes from a loopback address (not 127.0.0.6).
func grpcCaller(ctx context.Context, trustLoopback, trustSidecar bool) caller {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return caller{}
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		return caller{trusted: true}
	}
	return caller{trusted: trustLoopback && p.Addr != nil && loopbackAddr(p.Addr.String(), trustSidecar)}
}

// httpCaller is a forward-auth caller with auth off: trusted only as a
// loopback peer, with trustLoopback.
func httpCaller(r *http.Request, trustLoopback, trustSidecar bool) caller {
	return caller{trusted: trustLoopback && loopbackAddr(r.RemoteAddr, trustSidecar)}
}

// sidecarInbound is the address Istio's sidecar connects every inbound
// caller to the workload from (InboundPassthroughBindIpv4): loopback, yet
// anyone on the pod network. Its IPv6 twin, ::6, is not loopback.
var sidecarInbound = netip.AddrFrom4([4]byte{127, 0, 0, 6})

// loopbackAddr reports whether a "host:port" peer address is a loopback
// IP other than sidecarInbound, which is never trusted (#26 item 9).
// Only the connection's own peer is judged, never a header. With
// trustSidecar (tests only: the broken variant) 127.0.0.6 counts too.
func loopbackAddr(addr string, trustSidecar bool) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsLoopback() && (ip != sidecarInbound || trustSidecar)
}
