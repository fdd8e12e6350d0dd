package storetest

import (
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// oddKeys are valid by lockstore.NormalizeKey but may trip a backend's
// layout: Redis's reserved "id:" and "fence:" keys, SyncGuard's old audit
// stream key, NUL bytes (PostgreSQL text), Firestore's reserved document
// names, path separators and dots.
var oddKeys = []string{
	"id:AAAAAAAAAAAAAAAAAAAAAA", "id:", "fence:x", "audit", "a\x00b", "\x00",
	".", "..", "/", "a/b", "__x__", "__name__", " ", "line\nbreak", "k\u200bzero-width",
	strings.Repeat("/", 100),
}

// inputKeys: every key is either an ordinary key or refused as input —
// lockstore.IsBadInput (InvalidArgument from BadInputf), before any I/O — never a store
// failure. The edge answers a refused key 400 "malformed"; anything else
// would be a 503 that any client could provoke, polluting the outage
// signal.
func (s *suite) inputKeys(t *caseT) {
	st, _ := s.fresh(t)
	for _, k := range oddKeys {
		_, err := st.Inspect(ctx(t), k)
		if err == nil {
			r, err := st.Acquire(ctx(t), k, 10*time.Second)
			if err != nil || !r.OK {
				t.Errorf("Inspect(%q) works but Acquire = %+v, %v", k, r, err)
				continue
			}
			if rel, err := st.Release(ctx(t), r.LockID); err != nil || !rel.OK {
				t.Errorf("Release of %q = %+v, %v", k, rel, err)
			}
			continue
		}
		if !lockstore.IsBadInput(err) {
			t.Errorf("Inspect(%q) = %v; want success or an input refusal (lockstore.IsBadInput)", k, err)
			continue
		}
		if _, aerr := st.Acquire(ctx(t), k, 10*time.Second); lockstore.CodeOf(aerr) != lockstore.InvalidArgument {
			t.Errorf("Inspect(%q) refuses the key but Acquire = %v", k, aerr)
		}
	}
}
