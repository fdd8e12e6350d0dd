package firestore

import (
	"context"
	"hash/maphash"
	"slices"

	"github.com/fencegate/fencegate/lockstore"
)

// keyLocks serialises this process's read-write transactions per lock
// document. Firestore transactions lock pessimistically: two transactions
// that both read a document and then both write it deadlock until the
// service aborts one (the emulator only after a 2 s lock timeout). Without
// this, a gateway whose clients race for one hot key would mostly contend
// with itself. With it, only transactions from different processes can
// meet inside Firestore, and the client library's bounded retries cover
// those.
//
// It is a fixed array of striped semaphores (channels, so a waiter honours
// its context): bounded memory, nothing to clean up; two keys sharing a
// stripe merely take turns.
type keyLocks struct {
	seed    maphash.Seed
	stripes [256]chan struct{}
}

func newKeyLocks() *keyLocks {
	k := &keyLocks{seed: maphash.MakeSeed()}
	for i := range k.stripes {
		k.stripes[i] = make(chan struct{}, 1)
	}
	return k
}

// lock takes the stripes of the given document IDs in ascending stripe
// order (so two multi-document lockers cannot deadlock each other) and
// returns the function that releases them. It fails with the context's
// Aborted/NetworkTimeout error if ctx ends while waiting.
func (k *keyLocks) lock(ctx context.Context, op string, ids ...string) (func(), error) {
	idx := make([]int, 0, len(ids))
	for _, id := range ids {
		idx = append(idx, int(maphash.String(k.seed, id)%uint64(len(k.stripes))))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	unlock := func(n int) {
		for _, i := range idx[:n] {
			<-k.stripes[i]
		}
	}
	for n, i := range idx {
		select {
		case k.stripes[i] <- struct{}{}:
		case <-ctx.Done():
			unlock(n)
			return nil, lockstore.ContextError(ctx, op)
		}
	}
	return func() { unlock(len(idx)) }, nil
}
