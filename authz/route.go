package authz

// Default request headers (lowercase, as Envoy hands them over).
const (
	HeaderKey      = "x-fence-key"      // the lock key, unless the route names it
	HeaderToken    = "x-fence-token"    // the presented fence, unless the route names another header
	HeaderLockID   = "x-fence-lock-id"  // the optional ownership proof; never reaches upstream
	HeaderProof    = "x-fence-proof"    // a signed write proof (package writeproof); reaches upstream, which may verify it too
	HeaderVerified = "x-fence-verified" // set towards upstream: the fence that was verified

	HeaderReason     = "x-fence-reason"      // denials: the reason
	HeaderDecisionID = "x-fence-decision-id" // every checked write: the decision id
	HeaderWouldDeny  = "x-fence-would-deny"  // towards upstream in dry-run: the reason enforce would have denied
)

// Route option names: Envoy context_extensions keys, and the query
// parameters of the HTTP forward-auth endpoint.
const (
	ExtKey     = "fence_key"     // a literal key, or a template over path segments: "orders/{2:int}" (fencecheck.ParseKeyTemplate)
	ExtHeader  = "fence_header"  // the header carrying the fence (default x-fence-token)
	ExtPolicy  = "fence_policy"  // holder | latest | off
	ExtMode    = "fence_mode"    // enforce | dry-run | warn
	ExtMethods = "fence_methods" // write methods: "POST,PUT", "+PROPFIND" (custom) or "*"; default everything but GET, HEAD, OPTIONS
	ExtRoute   = "fence_route"   // the route's name, for audit and logs
	ExtProof   = "fence_proof"   // none | lockId | signed: what a write must carry besides its fence (fencecheck.ProofMode)
)

// routeOptions are a route's settings, from context_extensions (gRPC) or
// headers/query (HTTP). Empty fields take the defaults.
type routeOptions struct {
	key, header, policy, mode, methods, name string
	proof                                    string
}

func optionsFromMap(m map[string]string) routeOptions {
	return routeOptions{
		key:     m[ExtKey],
		header:  m[ExtHeader],
		policy:  m[ExtPolicy],
		mode:    m[ExtMode],
		methods: m[ExtMethods],
		name:    m[ExtRoute],
		proof:   m[ExtProof],
	}
}
