package firestore

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
)

// TestUnreachableFirestoreIsServiceUnavailable: the client library retries
// UNAVAILABLE until its context ends; the store's own bound turns an
// unreachable Firestore into ServiceUnavailable, promptly, for a caller
// without a deadline; a caller's sooner deadline stays NetworkTimeout.
func TestUnreachableFirestoreIsServiceUnavailable(t *testing.T) {
	l := testutil.Listen(t)
	dead := l.Addr().String()
	l.Close() // nothing listens here now
	t.Setenv("FIRESTORE_EMULATOR_HOST", dead)

	const bound = 400 * time.Millisecond
	s, err := Open(context.Background(), Config{ProjectID: "unreachable", OpTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	start := time.Now()
	_, err = s.Acquire(context.Background(), "k", time.Second)
	if took := time.Since(start); took > bound+3*time.Second {
		t.Fatalf("acquire took %s with a %s bound", took, bound)
	}
	if got := lockstore.CodeOf(err); got != lockstore.ServiceUnavailable {
		t.Fatalf("acquire against nothing: %v (code %s), want ServiceUnavailable", err, got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.IsLocked(ctx, "k"); lockstore.CodeOf(err) != lockstore.NetworkTimeout {
		t.Fatalf("caller's own deadline: %v, want NetworkTimeout", err)
	}
}
