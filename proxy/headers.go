package proxy

import (
	"net/http"

	"github.com/fencegate/fencegate/fencecheck"
	"github.com/fencegate/fencegate/fencewire"
)

// Request headers a client must not be able to hand an upstream. The rules
// compare a header's name the way CGI, WSGI, Rack and PHP read it: "_" as
// "-", any case (X_Fence_Verified and X-Fence-Verified are both
// HTTP_X_FENCE_VERIFIED there, while net/http keeps them apart). Every
// other punctuation a header name may hold ("." "~" "!" and the rest) is
// read as "-" too: some gateways map any of it to "_".
var (
	// methodOverrideHeaders make frameworks (Rails, Laravel, Symfony,
	// Express's method-override, ASP.NET) run another method than the one
	// the proxy checked: a GET, passed as a read, would act as a DELETE.
	// A request carrying one is refused.
	methodOverrideHeaders = []string{"x-http-method-override", "x-http-method", "x-method-override"}
	// clientClaimHeaders are what a trusted front proxy sets and upstreams
	// believe: the client's address (X-Real-IP, True-Client-IP and kin)
	// and the original URL (IIS, Symfony and Zend read X-Original-URL and
	// X-Rewrite-URL as the path to route). From a client they are
	// claims nobody checked: stripped. (X-Forwarded-* and Forwarded are
	// stripped by prefix below.)
	clientClaimHeaders = []string{
		"x-real-ip", "true-client-ip", "x-client-ip", "x-cluster-client-ip", "client-ip",
		"cf-connecting-ip", "fastly-client-ip", "x-original-forwarded-for",
		"x-original-url", "x-rewrite-url", "x-original-uri",
	}
)

// foldByte is one byte of a header name as CGI-style upstreams read it:
// lower case, every byte but a letter or digit as "-".
func foldByte(c byte) byte {
	switch {
	case c >= 'A' && c <= 'Z':
		return c + ('a' - 'A')
	case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return c
	}
	return '-'
}

// foldHasPrefix reports whether name, read as foldByte reads it, starts
// with prefix (lower case, "-" for punctuation); without allocating, since
// it runs for every header of every request.
func foldHasPrefix(name, prefix string) bool {
	if len(name) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if foldByte(name[i]) != prefix[i] {
			return false
		}
	}
	return true
}

// foldEqual reports whether name, read as foldByte reads it, is folded.
func foldEqual(name, folded string) bool {
	return len(name) == len(folded) && foldHasPrefix(name, folded)
}

// foldHeader is a header name as CGI-style upstreams read it.
func foldHeader(name string) string {
	b := []byte(name)
	for i, c := range b {
		b[i] = foldByte(c)
	}
	return string(b)
}

// methodOverride returns the first header of h that asks the upstream to
// run another method, in any spelling, or "".
func methodOverride(h http.Header) string {
	for name := range h {
		for _, m := range methodOverrideHeaders {
			if foldEqual(name, m) {
				return name
			}
		}
	}
	return ""
}

// headerPolicy is what one route lets through of the client's headers that
// an upstream could read as the proxy's.
type headerPolicy struct {
	// pass are the canonical names of the fence inputs the check read and
	// the upstream may read too: the route's fence header, its key header
	// (only where the key comes from a header) and x-fence-proof.
	pass map[string]bool
	// inputs are the folded names of the route's own input headers (a
	// custom fence or key header), whose other spellings are stripped.
	inputs []string
}

// newHeaderPolicy is the policy of an entry's compiled options (its header
// names are lower case, with their defaults).
func newHeaderPolicy(r *fencecheck.Route) headerPolicy {
	fence := r.FenceHeader
	hp := headerPolicy{pass: map[string]bool{}}
	add := func(name string) {
		hp.pass[http.CanonicalHeaderKey(name)] = true
		hp.inputs = append(hp.inputs, foldHeader(name))
	}
	add(fence)
	add(fencewire.HeaderProof)
	if r.Key == nil {
		add(r.KeyHeader)
	}
	return hp
}

// strip removes from h, the headers going upstream, every client header an
// upstream could take for one the proxy sets or vouches for:
//   - every x-fence-* but the route's fence inputs in their one spelling
//     (the check read those); this includes the client's x-fence-key on a
//     template route, and x-fence-verified, -would-deny, -decision-id,
//     -lock-id, which the proxy sets or removes anyway;
//   - every x-forwarded-* and forwarded (the proxy sets X-Forwarded-For,
//     -Host and -Proto afresh afterwards, keeping the client's with
//     TrustForwarded);
//   - the client-claim headers above;
//   - any other spelling of the route's own fence or key header.
//
// Each in any spelling foldHeader reads as the same name; the pass list
// holds canonical names, which are in the one spelling (net/http
// canonicalises "x-fence-token" to "X-Fence-Token" but leaves
// "X_Fence_Token" apart).
func (hp headerPolicy) strip(h http.Header) {
	for name := range h {
		if hp.pass[name] {
			continue
		}
		if hp.drops(name) {
			delete(h, name)
		}
	}
}

func (hp headerPolicy) drops(name string) bool {
	if foldHasPrefix(name, fencewire.HeaderPrefix) || foldHasPrefix(name, "x-forwarded-") || foldEqual(name, "forwarded") {
		return true
	}
	for _, f := range hp.inputs {
		if foldEqual(name, f) {
			return true
		}
	}
	for _, c := range clientClaimHeaders {
		if foldEqual(name, c) {
			return true
		}
	}
	return false
}
