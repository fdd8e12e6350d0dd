package lockserver

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate/auth"
	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// acquire takes the lock (acquireLock) and, when the server has proof
// keys, signs the write proof for the fence it issued: HTTP and gRPC both
// answer it next to the lockId. The answer is the holder's lock.Acquired
// (the store's result and the proof: a gateway concept, not the store's),
// the same value a lock.Locker hands the lock helpers.
func (s *Server) acquire(ctx context.Context, p *auth.Principal, key string, ttlMs, waitMs *int64) (lock.Acquired, error) {
	res, err := s.acquireLock(ctx, p, key, ttlMs, waitMs)
	if err != nil || !res.OK || s.proofs == nil {
		return lock.Acquired{AcquireResult: res}, err
	}
	proof, serr := s.proofs.Sign(key, res.Fence, res.LockID)
	if serr != nil {
		// Only a fence outside [1, FenceMax] fails to sign, which no
		// store issues. Give the lock back rather than leave the caller
		// without its lockId until the TTL runs out.
		if _, rerr := s.store.Release(context.WithoutCancel(ctx), res.LockID); rerr != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "api: releasing a lock whose proof could not be signed failed", slog.Any("error", rerr))
		}
		return lock.Acquired{}, lockstore.Errorf(lockstore.Internal, "acquire", "signing the write proof: %v", serr)
	}
	return lock.Acquired{AcquireResult: res, Proof: proof}, nil
}

// proofKeys serves GET wire.PathProofKeys: the public keys that verify
// write proofs, signing key first, for APIs that verify proofs offline.
// No token is needed (they are public); 404 when the gateway signs none.
func (s *Server) proofKeys(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeJSON(w, http.StatusMethodNotAllowed, errorReply{errorBody{Code: lockstore.InvalidArgument, Message: "method " + r.Method + " not allowed; use GET"}})
		return
	}
	if s.proofs == nil {
		writeJSON(w, http.StatusNotFound, errorReply{errorBody{Code: lockstore.InvalidArgument, Message: "this gateway signs no write proofs (no proof.keys configured)"}})
		return
	}
	// Keys change only with a restart (rotation is a config change), but
	// a verifier must pick up the next key soon after: cache briefly.
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, s.proofs.Verifier().KeySet())
}
