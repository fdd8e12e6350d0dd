package firestore

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url  string
		want Config
	}{
		{"firestore://proj", Config{ProjectID: "proj"}},
		{"firestore://proj/", Config{ProjectID: "proj"}},
		{"firestore://proj?database=orders-db", Config{ProjectID: "proj", DatabaseID: "orders-db"}},
		{"firestore://proj?database=(default)", Config{ProjectID: "proj", DatabaseID: "(default)"}},
		{"firestore://proj?collection=l&fenceCollection=f&auditCollection=a&maxAttempts=3",
			Config{ProjectID: "proj", Collection: "l", FenceCollection: "f", AuditCollection: "a", MaxAttempts: 3}},
		{"firestore://proj?barrierCollection=w", Config{ProjectID: "proj", BarrierCollection: "w"}},
		{"firestore://proj?auditMaxEvents=50&auditMaxAge=36h",
			Config{ProjectID: "proj", AuditRetention: lockstore.AuditRetention{MaxEvents: 50, MaxAge: 36 * time.Hour}}},
	}
	for _, g := range good {
		got, err := ParseURL(g.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", g.url, err)
			continue
		}
		if got.ProjectID != g.want.ProjectID || got.DatabaseID != g.want.DatabaseID || got.Collection != g.want.Collection ||
			got.FenceCollection != g.want.FenceCollection || got.AuditCollection != g.want.AuditCollection || got.MaxAttempts != g.want.MaxAttempts ||
			got.BarrierCollection != g.want.BarrierCollection ||
			got.AuditRetention != g.want.AuditRetention {
			t.Errorf("ParseURL(%q) = %+v, want %+v", g.url, got, g.want)
		}
	}

	bad := []struct{ url, mention string }{
		{"redis://proj", "scheme"},
		{"firestore://", "project ID is required"},
		{"firestore://user:pw@proj", "credentials"},
		{"firestore://proj/locks", "no path"},
		{"firestore://proj?colection=x", `unknown parameter "colection"`},
		{"firestore://proj?database=a&database=b", "given 2 times"},
		{"firestore://proj?database=Bad_DB", "not a valid database ID"},
		{"firestore://proj?maxAttempts=0", "maxAttempts"},
		{"firestore://proj?auditMaxEvents=-1", "auditMaxEvents"},
		{"firestore://proj?auditMaxAge=7d", "auditMaxAge"},
		{"firestore://proj?collection=fence_counters", "fenceCollection must differ from collection"},
		{"firestore://proj?auditCollection=fence_counters", "fenceCollection must differ from auditCollection"},
		{"firestore://proj?auditCollection=locks", "auditCollection must differ from collection"},
		{"firestore://proj?auditCollection=a&fenceCollection=a_input", "puts input audit events in \"a_input\""},
		{"firestore://proj?auditCollection=locks_x&collection=locks_x_input", "puts input audit events"},
		{"firestore://proj?barrierCollection=locks", "barrierCollection must differ"},
		{"firestore://proj?barrierCollection=fencegate_audit", "barrierCollection must differ"},
		{"firestore://proj?barrierCollection=__w__", "reserved"},
		{"firestore://proj?collection=a%2Fb", "must not contain '/'"},
		{"firestore://proj?collection=__locks__", "reserved"},
		{"firestore://proj?fenceCollection=..", "'..'"},
	}
	for _, b := range bad {
		_, err := ParseURL(b.url)
		if lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("ParseURL(%q) = %v, want InvalidArgument", b.url, err)
			continue
		}
		if !strings.Contains(err.Error(), b.mention) {
			t.Errorf("ParseURL(%q) error %q does not mention %q", b.url, err, b.mention)
		}
	}
}

func TestValidateDefaults(t *testing.T) {
	if err := (Config{ProjectID: "p"}).Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	c := Config{ProjectID: "p"}.withDefaults()
	if c.Collection != "locks" || c.FenceCollection != "fence_counters" || c.AuditCollection != "fencegate_audit" ||
		c.BarrierCollection != "fencegate_write_barrier" {
		t.Fatalf("defaults are not SyncGuard's layout: %+v", c)
	}
	if c.MaxAttempts != DefaultMaxAttempts || c.Now == nil || c.Logger == nil {
		t.Fatalf("defaults not filled: %+v", c)
	}
	// Every problem is listed, not just the first.
	err := Config{Collection: "x/y", FenceCollection: "x/y"}.Validate()
	for _, want := range []string{"project ID", "must not contain '/'", "must differ"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %v does not mention %q", err, want)
		}
	}
}

func TestDocIDs(t *testing.T) {
	cases := []struct {
		key    string
		hashed bool
	}{
		{"resource:123", false},
		{"fence:x", false},
		{"id:x", false},
		{"__", false},
		{"___", false},
		{"__x", false},
		{"x__", false},
		{"a.b", false},
		{"...", false},
		{"a/b", true},
		{"/", true},
		{"a/b/c", true},
		{".", true},
		{"..", true},
		{"____", true},
		{"__x__", true},
		{strings.Repeat("k", lockstore.MaxKeyLengthBytes), false},
	}
	seen := map[string]string{}
	for _, c := range cases {
		lock, fence, err := docIDs(c.key)
		if err != nil {
			t.Fatalf("docIDs(%q): %v", c.key, err)
		}
		if !legalDocID(lock) || !legalDocID(fence) {
			t.Errorf("docIDs(%q) = %q, %q: not legal document IDs", c.key, lock, fence)
		}
		if c.hashed != (lock != c.key) {
			t.Errorf("docIDs(%q) lock ID %q, hashed=%v, want hashed=%v", c.key, lock, lock != c.key, c.hashed)
		}
		if c.hashed && len(lock) != 22 {
			t.Errorf("hashed lock ID %q is not 22 characters", lock)
		}
		if fence != "fence:"+lock {
			t.Errorf("fence ID %q is not the two-step derivation of %q", fence, lock)
		}
		if prev, dup := seen[lock]; dup {
			t.Errorf("keys %q and %q share lock document %q", prev, c.key, lock)
		}
		seen[lock] = c.key
	}
	// The hashed form is makeStorageKey's (value computed independently
	// with Python's hashlib): pin it so a change of
	// derivation (which would orphan existing locks and counters) fails.
	if lock, _, _ := docIDs("a/b"); lock != "wUzdwDP2S53qgOpnXPKAoA" {
		t.Errorf("docIDs(\"a/b\") = %q; the derivation changed", lock)
	}
}

// TestParseURLFenceFloor: the fenceFloor parameter every backend takes.
func TestParseURLFenceFloor(t *testing.T) {
	storetest.FenceFloorParam(t, func(q string) (backend.FenceFloor, error) {
		cfg, err := ParseURL("firestore://proj?" + q)
		return cfg.FenceFloor, err
	})
}
