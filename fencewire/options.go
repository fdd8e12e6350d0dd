package fencewire

// Route option names: Envoy context_extensions keys (ext_authz, ext_proc;
// the Gateway API generators of deploy/mesh write ExtRoute), and the query
// parameters of the HTTP forward-auth endpoint.
const (
	ExtKey     = "fence_key"     // a literal key, or a template over path segments: "orders/{2:int}" (fencecheck.ParseKeyTemplate)
	ExtHeader  = "fence_header"  // the header carrying the fence (default x-fence-token)
	ExtPolicy  = "fence_policy"  // holder | latest | off
	ExtMode    = "fence_mode"    // enforce | dry-run | warn
	ExtMethods = "fence_methods" // write methods: "POST,PUT", "+PROPFIND" (custom) or "*"; default everything but GET, HEAD, OPTIONS
	ExtRoute   = "fence_route"   // from a trusted caller, names a route table entry; else the route's name, for audit and logs
	// ExtBarrier asks for the write barrier: "on" or "off". Only ext_proc
	// can keep it; on ext_authz and forward-auth a route asking for it is
	// misconfigured, and its writes fail closed (503 unavailable).
	ExtBarrier = "fence_barrier"
	// ExtMaxWrite is the barrier's maxWrite ("30s"; default
	// fencecheck.DefaultMaxWrite).
	ExtMaxWrite = "fence_max_write"
	ExtProof    = "fence_proof" // none | lockId | signed: what a write must carry besides its fence (fencecheck.ProofMode)
	// ExtMaxWait is the barrier's maxWait ("2s"; default check.timeout,
	// what one Envoy ext_proc message timeout affords): how long a newer
	// fence waits for an older write in flight before it is refused
	// draining. Only with fence_barrier on.
	ExtMaxWait = "fence_max_wait"
)
