package firestore

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures one uncontended acquire+release cycle
// against the emulator (FIRESTORE_EMULATOR_HOST). Keys rotate so no cycle
// waits on the previous one's documents.
//
//	go test -run '^$' -bench AcquireRelease ./lockstore/firestore/
func BenchmarkAcquireRelease(b *testing.B) {
	s := openStore(b, nsConfig(b, uniqueNS(b)))
	ctx := bg(b)
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("bench-%d", i%64)
		i++
		r, err := s.Acquire(ctx, key, 30*time.Second)
		if err != nil || !r.OK {
			b.Fatalf("Acquire = %+v, %v", r, err)
		}
		rr, err := s.Release(ctx, r.LockID)
		if err != nil || !rr.OK {
			b.Fatalf("Release = %+v, %v", rr, err)
		}
	}
}

// BenchmarkInspect measures the edge check's read: one batched get.
func BenchmarkInspect(b *testing.B) {
	s := openStore(b, nsConfig(b, uniqueNS(b)))
	ctx := bg(b)
	if _, err := s.Acquire(ctx, "inspect", time.Hour); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if st, err := s.Inspect(ctx, "inspect"); err != nil || st.Live == nil {
			b.Fatalf("Inspect = %+v, %v", st, err)
		}
	}
}
