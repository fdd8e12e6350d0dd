package fencewire

// Header names, lower case as Envoy hands them over (HTTP header names are
// case-insensitive; net/http canonicalises them).
const (
	// HeaderPrefix begins every header of the edge's own: the proxy strips
	// every client header under it but the route's fence inputs, so no
	// upstream can take a client's for one the edge set.
	HeaderPrefix = "x-fence-"

	// What a holder sends with a write.
	HeaderKey    = "x-fence-key"     // the lock key, unless the route names it
	HeaderToken  = "x-fence-token"   // the presented fence, unless the route names another header
	HeaderLockID = "x-fence-lock-id" // the optional ownership proof; never reaches upstream
	HeaderProof  = "x-fence-proof"   // a signed write proof (package writeproof); reaches upstream, which may verify it too

	// What the edge sets towards upstream.
	HeaderVerified  = "x-fence-verified"   // the fence the edge checked and found current
	HeaderWouldDeny = "x-fence-would-deny" // dry-run: the reason enforce would have denied

	// What the edge answers (and the resource side echoes).
	HeaderReason     = "x-fence-reason"      // denials: the reason
	HeaderDecisionID = "x-fence-decision-id" // every checked write: the decision id
)

// Route options as forward-auth request headers, for proxies that set
// per-location headers on the auth request (nginx proxy_set_header, Envoy
// authorization_request.headers_to_add). authz ignores them with the
// X-Forwarded-* convention (Caddy and Traefik copy client headers to the auth
// request).
const (
	HeaderRouteKey     = "x-fence-route-key"
	HeaderRouteHeader  = "x-fence-route-header"
	HeaderRoutePolicy  = "x-fence-route-policy"
	HeaderRouteMode    = "x-fence-route-mode"
	HeaderRouteMethods = "x-fence-route-methods"
	HeaderRouteName    = "x-fence-route-name"
	// HeaderRouteBarrier asks for the write barrier, which forward-auth
	// cannot keep: a route that sets it (or fence_barrier in the query)
	// fails its writes closed.
	HeaderRouteBarrier = "x-fence-route-barrier"
	HeaderRouteProof   = "x-fence-route-proof"
)

// Forward-auth's status mapping for nginx: its auth_request passes only 2xx,
// 401 and 403, so with HeaderAuthRequest "nginx" every denial is answered
// 403 and the real status and JSON body travel in HeaderStatus and
// HeaderBody for the shipped nginx config to replay.
const (
	HeaderAuthRequest = "x-fence-auth-request"
	HeaderStatus      = "x-fence-status"
	HeaderBody        = "x-fence-body"
)
