package fencecheck

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

// DefaultTimeout bounds one check's backend read. Envoy's ext_authz timeout
// is typically 200–250 ms; deciding well inside it means the proxy sees our
// fail-closed 503 rather than its own timeout.
const DefaultTimeout = 150 * time.Millisecond

// Options configure a Checker. The zero value is usable: 150 ms timeout, no
// audit, unregistered metrics, slog.Default(), time.Now.
type Options struct {
	// Timeout bounds the backend read of one check (default 150 ms). The
	// caller's context deadline, if sooner, wins.
	Timeout time.Duration
	// Audit receives an event for every denial and would-deny; nil disables
	// auditing.
	Audit *Auditor
	// AuditRawKeys puts the raw key, and the request path (which on a
	// template route spells the key out), into audit events next to the
	// key's hash. Off, events carry neither.
	AuditRawKeys bool
	// Registerer registers the check metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Logger logs backend failures (warn) and denials (debug), never a raw
	// key, fence token or lockId above debug; nil is slog.Default().
	Logger *slog.Logger
	// Now stamps audit events; nil is time.Now.
	Now func() time.Time
	// FinishTimeout bounds the store call of Finish (default 2 s).
	FinishTimeout time.Duration
	// Proofs verifies signed write proofs (ProofSigned routes); nil makes
	// every write on such a route fail closed (503).
	Proofs *writeproof.Verifier
	// HideCurrentFence leaves the current fence out of the Decision of a
	// denial (and so out of every transport's denial body, headers and
	// admission message) for operators who do not want a denial to tell
	// anyone the fence to replay. Audit events keep it.
	HideCurrentFence bool
	// MaxWriteCap bounds the MaxWrite (or DefaultMaxWrite, when unset) of
	// every barrier Request, from proxy routes and ext_proc callers alike;
	// a Request above it fails closed (ErrMaxWriteOverCap), never clamped.
	// Zero is lockstore.MaxWriteLimit (the store's own bound: no cap), for
	// library use; `fencegate serve` and `fencegate proxy` always set it
	// (check.maxWriteCap, default DefaultMaxWriteCap).
	MaxWriteCap time.Duration
	// BarrierMaxInFlight caps a key's writes in flight on barrier routes
	// (lockstore.WriteAdmission.MaxInFlight): one more is refused
	// "too-many-writes". 0 is lockstore.DefaultMaxInFlight (1024).
	BarrierMaxInFlight int
	// MaxWaitCap bounds the MaxWait of every barrier Request (proxy routes
	// and ext_proc callers alike), so that no route can park a connection
	// at the barrier for long; a Request above it fails closed
	// (ErrMaxWaitOverCap). 0 is DefaultMaxWaitCap (check.maxWaitCap).
	MaxWaitCap time.Duration
	// BarrierMaxWaiters caps the barrier writes this Checker has waiting
	// at once, over all keys; one more that would wait is refused
	// "draining" at once (fencegate_barrier_waiters_full_total). Each
	// waiter holds a client connection (bounded by the listeners'
	// connection slots) and re-checks the store every 100 ms at most; the
	// cap bounds that store load whatever the listeners admit. The writes
	// of one key, and those of one client (Request.Peer's address), hold
	// at most an eighth of the slots, so that neither can refuse another
	// key's writes their wait. 0 is DefaultBarrierMaxWaiters.
	BarrierMaxWaiters int
}

// Checker decides edge checks against one store. It is safe for concurrent
// use.
type Checker struct {
	store   lockstore.EdgeState
	timeout time.Duration
	// finishTimeout bounds Finish's store call.
	finishTimeout time.Duration
	audit         *Auditor
	rawKeys       bool
	log           *slog.Logger
	now           func() time.Time
	m             *checkMetrics
	proofs        *writeproof.Verifier
	hideCurrent   bool
	maxWriteCap   time.Duration
	// routeWarn paces warnRoute; routeWarnDropped counts the lines it held back.
	routeWarn        *rate.Limiter
	routeWarnDropped atomic.Int64
	maxInFlight      int
	// The barrier's waits: the longest a Request may ask for, the cap on
	// writes waiting at once and their count, and the per-key wake-ups.
	maxWaitCap time.Duration
	maxWaiters int64
	waiters    atomic.Int64 // writes holding a slot of slots
	slots      *waiterSlots
	wake       *keyWake
	// pollMin, pollMax bound the sleeps between a waiter's store re-checks
	// (the constants; tests lengthen them to tell a wake-up from a poll).
	pollMin, pollMax time.Duration
	// broken selects a deliberately broken wait (tests only).
	broken brokenWait
	// trustRoute takes a compiled Request's route options whatever its
	// fields say, and its normalised key whatever its key says (tests
	// only: the broken variant of Request.options and NormalizeKey).
	trustRoute bool
}

// New returns a Checker reading and writing the edge state s (a
// lockstore.Store is one).
func New(s lockstore.EdgeState, o Options) *Checker {
	c := &Checker{
		store:   s,
		timeout: o.Timeout,
		audit:   o.Audit,
		rawKeys: o.AuditRawKeys,
		log:     o.Logger,
		now:     o.Now,
		m:       newCheckMetrics(o.Registerer),
		proofs:  o.Proofs,

		hideCurrent: o.HideCurrentFence,
		maxInFlight: o.BarrierMaxInFlight,

		finishTimeout: o.FinishTimeout,
		maxWriteCap:   o.MaxWriteCap,
		routeWarn:     rate.NewLimiter(1, routeWarnBurst),

		maxWaitCap: o.MaxWaitCap,
		maxWaiters: int64(o.BarrierMaxWaiters),
		wake:       newKeyWake(),
		pollMin:    pollMin,
		pollMax:    pollMax,
	}
	if c.maxWaitCap <= 0 {
		c.maxWaitCap = DefaultMaxWaitCap
	}
	if c.maxWaiters <= 0 {
		c.maxWaiters = DefaultBarrierMaxWaiters
	}
	c.slots = newWaiterSlots(int(c.maxWaiters), false)
	if c.maxWriteCap <= 0 || c.maxWriteCap > lockstore.MaxWriteLimit {
		c.maxWriteCap = lockstore.MaxWriteLimit
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.finishTimeout <= 0 {
		c.finishTimeout = DefaultFinishTimeout
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Check decides r. A denial is a Decision with Allowed=false and a nil
// error. A non-nil error means the check could not decide (backend error or
// deadline, or a Request with an unknown policy or mode); the Decision
// returned with it is the fail-closed denial (reason "unavailable", status
// 503), except in dry-run and warn modes, which allow and return a nil error
// (see the package doc).
func (c *Checker) Check(ctx context.Context, r Request) (Decision, error) {
	r = r.bounded()
	start := time.Now()
	d, err := c.tracedCheck(ctx, r)
	c.m.duration.Observe(time.Since(start).Seconds())

	label := decisionAllow
	switch {
	case !d.Allowed:
		label = decisionDeny
	case d.WouldDeny:
		label = decisionWouldDeny
	}
	reason := string(d.Reason)
	if reason == "" {
		reason = reasonNone
	}
	c.m.decision(label, reason, modeLabel(d.Mode)).Inc()

	if (!d.Allowed || d.WouldDeny) && !r.SkipAudit && c.audit != nil {
		c.audit.Record(c.event(r, d))
	}
	if c.hideCurrent && !d.Allowed {
		d.Current = "" // after the audit event took it; an allowed write's is the presented fence
	}
	// Enabled first: the attrs (a SHA-256 of the key) are built only for a
	// line that is written.
	if (!d.Allowed || d.WouldDeny) && c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.LogAttrs(ctx, slog.LevelDebug, "fencecheck: negative decision",
			slog.String("decisionId", d.DecisionID),
			slog.String("reason", string(d.Reason)),
			slog.String("mode", string(d.Mode)),
			slog.String("keyHash", lockstore.HashKey(d.auditKey())),
			slog.String("route", r.Route))
	}
	return d, err
}

// modeLabel bounds the mode metric label to the known modes: a Decision
// built anywhere with an unparsed mode still cannot mint a series.
func modeLabel(m Mode) string {
	switch m {
	case ModeEnforce, ModeDryRun, ModeWarn:
		return string(m)
	}
	return string(ModeEnforce)
}

func (c *Checker) check(ctx context.Context, r Request) (Decision, error) {
	d := Decision{Presented: lockstore.Clip(r.Fence, lockstore.MaxAuditPresented), Key: r.Key, Policy: r.Policy, Mode: r.Mode}
	o := r.options()
	if c.trustRoute && r.route != nil {
		o = checkOptions{policy: r.route.Policy, mode: r.route.Mode, proof: r.route.Proof}
	}
	if !r.Write {
		// Reads pass whatever the route's options say, even broken ones.
		d.Allowed, d.Status = true, http.StatusOK
		if o.policyErr == nil {
			d.Policy = o.policy
		}
		// An unreadable mode is reported as enforce (what a write on this
		// route gets), never echoed: it becomes a metric label, and the raw
		// string may be anything a client managed to send.
		d.Mode = ModeEnforce
		if o.modeErr == nil {
			d.Mode = o.mode
		}
		return d, nil
	}
	var pc proofCheck
	err := r.RouteError
	if err == nil {
		if err = o.policyErr; err == nil {
			d.Policy = o.policy
			if err = o.modeErr; err == nil {
				d.Mode = o.mode
			}
		}
	}
	if err == nil {
		pc.mode, err = o.proof, o.proofErr
	}
	if mw := r.MaxWrite; err == nil && r.Barrier {
		if mw <= 0 {
			mw = DefaultMaxWrite // what admit registers, and what a transport times the write by
		}
		if mw > c.maxWriteCap {
			err = fmt.Errorf("%w: %s > %s", ErrMaxWriteOverCap, mw, c.maxWriteCap)
		}
		if r.MaxWait > c.maxWaitCap {
			err = fmt.Errorf("%w: %s > %s", ErrMaxWaitOverCap, r.MaxWait, c.maxWaitCap)
		}
	}
	if err != nil {
		// The route is misconfigured: fail closed, loudly.
		d.Policy, d.Mode = r.Policy, ModeEnforce
		d = c.unavailable(d)
		c.warnRoute(ctx, d.DecisionID, r.Route, err)
		return d, err
	}

	if d.Policy == PolicyOff {
		d.Allowed, d.Status = true, http.StatusOK
		return d, nil
	}
	d.DecisionID = newDecisionID()

	// Input checks: none of these needs the backend.
	switch {
	case r.Ambiguous:
		return c.negative(d, ReasonMalformed), nil
	case r.Fence == "":
		return c.negative(d, ReasonMissing), nil
	case !lockstore.ValidFence(r.Fence):
		return c.negative(d, ReasonMalformed), nil
	}
	// The one normalisation of the key in this decision (or the
	// transport's, kept by Request.NormalizeKey): the proof, the store
	// call, the barrier, the log and the audit event all take this form.
	if c.trustRoute && r.normKey != "" {
		r.normOf = r.Key
	}
	key, kerr := r.NormalizeKey()
	if kerr != nil {
		return c.negative(d, ReasonMalformed), nil
	}
	d.nkey = key
	if r.LockID != "" && lockstore.ValidateLockID(r.LockID) != nil {
		return c.negative(d, ReasonMalformed), nil
	}
	if reason, perr := c.checkProofInput(ctx, r, key, &pc); perr != nil {
		d = c.unavailable(d)
		c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: route cannot be decided; failing closed",
			slog.String("decisionId", d.DecisionID), slog.String("route", r.Route), slog.Any("error", perr))
		if d.Allowed {
			return d, nil
		}
		return d, perr
	} else if reason != "" {
		return c.negative(d, reason), nil
	}

	if r.Barrier {
		return c.admit(ctx, d, r, key, pc)
	}

	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	st, ierr := c.store.Inspect(rctx, key)
	cancel()
	if refusedInput(ierr) {
		// The backend refuses this key as input (e.g. Redis's reserved
		// "id:" and "fence:" keys): the request is bad, the store is fine.
		// A 503 and a WARN here would let any client fake an outage.
		return c.negative(d, ReasonMalformed), nil
	}
	if ierr != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: backend read failed; failing closed",
			slog.String("decisionId", d.DecisionID),
			slog.String("keyHash", lockstore.HashKey(key)),
			slog.String("code", string(lockstore.CodeOf(ierr))),
			slog.Any("error", ierr))
		d = c.unavailable(d)
		if d.Allowed { // dry-run / warn: observed, not enforced
			return d, nil
		}
		return d, fmt.Errorf("fencecheck: inspect: %w", ierr)
	}
	d.Current = st.LatestFence
	return c.evaluate(d, r, pc, st), nil
}

// evaluate applies the policy, and a signed proof's holder, to a state read
// from the backend.
func (c *Checker) evaluate(d Decision, r Request, pc proofCheck, st lockstore.KeyState) Decision {
	if !proofHolds(pc, st.Live) {
		return c.negative(d, ReasonWrongOwner)
	}
	// Both are exactly 15 digits (or latest is empty), so string order is
	// numeric order.
	switch latest := st.LatestFence; {
	case latest == "" || r.Fence > latest:
		return c.negative(d, ReasonUnknown)
	case r.Fence < latest:
		return c.negative(d, ReasonStale)
	}
	live := st.Live
	holds := live != nil && live.Fence == r.Fence
	if d.Policy == PolicyHolder && !holds {
		return c.negative(d, ReasonNotHeld)
	}
	if r.LockID != "" {
		if !holds {
			// A proof of ownership with nothing live to own (policy latest).
			return c.negative(d, ReasonNotHeld)
		}
		if subtle.ConstantTimeCompare([]byte(r.LockID), []byte(live.LockID)) != 1 {
			return c.negative(d, ReasonWrongOwner)
		}
	}
	d.Allowed, d.Status = true, http.StatusOK
	return d
}

// negative turns a negative evaluation into the mode's answer.
func (c *Checker) negative(d Decision, reason Reason) Decision {
	d.Reason = reason
	if d.Mode == ModeDryRun || d.Mode == ModeWarn {
		d.Allowed, d.WouldDeny, d.Status = true, true, http.StatusOK
		return d
	}
	d.Allowed, d.Status = false, StatusOf(reason)
	return d
}

func (c *Checker) unavailable(d Decision) Decision {
	if d.DecisionID == "" {
		d.DecisionID = newDecisionID()
	}
	return c.negative(d, ReasonUnavailable)
}

func (c *Checker) event(r Request, d Decision) lockstore.AuditEvent {
	k := d.auditKey()
	ev := lockstore.AuditEvent{
		TimeMs:     c.now().UnixMilli(),
		DecisionID: d.DecisionID,
		Source:     r.Source,
		Route:      r.Route,
		KeyHash:    lockstore.HashKey(k),
		KeyDigest:  lockstore.DigestKey(k).String(),
		Presented:  d.Presented,
		Current:    d.Current,
		Reason:     string(d.Reason),
		Policy:     string(d.Policy),
		Mode:       string(d.Mode),
		Peer:       r.Peer,
		Method:     r.Method,
	}
	if c.rawKeys {
		// The path goes with the raw key: on a template route
		// ("orders/{2}") the path spells the key out.
		ev.Key, ev.Path = r.Key, r.Path
	}
	return ev.Bounded()
}

// bounded cuts the request's audit context (route, source, peer, method,
// path) to the audit event's bounds where it enters the check, so that no
// log line, event or page downstream repeats an attacker-sized value. The
// key, fence, lockId and proof are not cut: the check itself refuses values
// past their sizes (malformed, bad-proof); their copies in the Decision and
// the event are.
func (r Request) bounded() Request {
	r.Route = lockstore.Clip(r.Route, lockstore.MaxAuditRoute)
	r.Source = lockstore.Clip(r.Source, lockstore.MaxAuditSource)
	r.Peer = lockstore.Clip(r.Peer, lockstore.MaxAuditPeer)
	r.Method = lockstore.Clip(r.Method, lockstore.MaxAuditMethod)
	r.Path = lockstore.Clip(r.Path, lockstore.MaxAuditPath)
	return r
}

// warnRoute logs a route whose options do not parse. A caller can send such
// options on every request (ext_authz context, forward-auth query), so the
// lines are rate-limited (routeWarnBurst, then one a second; the next line
// written says how many were dropped) and the error, which quotes the
// option's value, is cut to routeWarnErrorBytes.
func (c *Checker) warnRoute(ctx context.Context, decisionID, route string, err error) {
	if !c.routeWarn.Allow() {
		c.routeWarnDropped.Add(1)
		return
	}
	attrs := []slog.Attr{slog.String("decisionId", decisionID), slog.String("route", route),
		slog.String("error", lockstore.Clip(err.Error(), routeWarnErrorBytes))}
	if n := c.routeWarnDropped.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	c.log.LogAttrs(ctx, slog.LevelWarn, "fencecheck: route options invalid; failing closed", attrs...)
}

// Bounds on warnRoute's lines.
const (
	routeWarnBurst      = 10
	routeWarnErrorBytes = 256
)

// decisionIDBytes gives 72 random bits: unique enough to find one decision
// among billions in an audit trail, short enough for a response header.
const decisionIDBytes = 9

// newDecisionID returns a random 12-character base64url identifier.
func newDecisionID() string {
	var b [decisionIDBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// refusedInput reports whether err is a backend refusing the request's
// input (lockstore.IsBadInput: NormalizeKey and every backend's own key
// checks build it with lockstore.BadInputf). Other InvalidArguments (a
// missing Firestore index or database, a misconfigured server) are
// deployment faults and fail closed as unavailable, loudly.
func refusedInput(err error) bool {
	// nil first: IsBadInput's errors.As target escapes, an allocation on
	// every allowed check.
	return err != nil && lockstore.IsBadInput(err)
}
