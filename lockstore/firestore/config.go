package firestore

import (
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/api/option"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Defaults of the store's layout. The lock and counter collections are
// SyncGuard's, so a fleet that already locks through the SyncGuard
// TypeScript library shares one fence sequence per key with fencegate.
const (
	DefaultCollection      = "locks"
	DefaultFenceCollection = "fence_counters"
	DefaultAuditCollection = "fencegate_audit"
	// DefaultBarrierCollection holds the write barrier's in-flight writes,
	// one document per key; fencegate's own (SyncGuard has no barrier).
	DefaultBarrierCollection = "fencegate_write_barrier"
	// DefaultMaxAttempts bounds how often the client library runs one
	// transaction when commits conflict (ABORTED). Each attempt is cheap,
	// but on the emulator, which locks pessimistically, a high bound turns
	// contention into long stalls; after the last attempt the operation
	// fails with ServiceUnavailable and the Lock helper's backoff takes over.
	DefaultMaxAttempts = 5
	// DefaultOpTimeout bounds one operation when the caller's context has
	// no sooner deadline. The client library retries UNAVAILABLE until its
	// context ends, so without a bound an unreachable Firestore holds the
	// caller forever; with it the caller gets ServiceUnavailable.
	DefaultOpTimeout = 4 * time.Second
)

// Scheme is the store URL scheme: firestore://PROJECT?database=…&collection=…
const Scheme = "firestore"

// Config configures a Firestore store. The zero value of every optional
// field takes the default.
type Config struct {
	// ProjectID is the Google Cloud project. Required (any non-empty name
	// works against the emulator).
	ProjectID string
	// DatabaseID selects a named database; "" means "(default)".
	DatabaseID string
	// Collection holds lock documents (default "locks").
	Collection string
	// FenceCollection holds fence counters, which are never deleted
	// (default "fence_counters"). It must differ from Collection and
	// AuditCollection: both of those see deletes.
	FenceCollection string
	// AuditCollection holds audit events (default "fencegate_audit"); the
	// input class (missing, malformed) goes to the same name plus "_input".
	AuditCollection string
	// BarrierCollection holds the write barrier's in-flight writes
	// (default "fencegate_write_barrier"). It must differ from the other
	// three.
	BarrierCollection string
	// AuditRetention bounds the audit collection; zero fields take the
	// lockstore defaults. Trimming is best effort, on append.
	AuditRetention lockstore.AuditRetention
	// MaxAttempts bounds the client library's transaction retries on
	// commit conflicts (default DefaultMaxAttempts).
	MaxAttempts int
	// OpTimeout bounds each operation (default DefaultOpTimeout); running
	// out of it is ServiceUnavailable, while the caller's own deadline is
	// NetworkTimeout.
	OpTimeout time.Duration
	// FenceFloor picks the next fence: the zero value, FloorClock, keeps
	// fences growing with the gateway's clock so that a database restored
	// to an earlier point cannot reissue one (backend.FloorLeadMax; the
	// gateways' clocks must agree within TimeToleranceMs, as expiry already
	// needs); FloorOff issues consecutive fences.
	FenceFloor backend.FenceFloor
	// Now is the time authority (default time.Now). Firestore has no server
	// clock we can read in a transaction, so the gateway's clock decides
	// expiry; keep it NTP-synced. Tests inject a fake clock here.
	Now func() time.Time
	// Logger receives warnings (duplicate lockIds, fence near its limit);
	// nil means slog.Default(). Lines carry hashes, never raw keys or lockIds.
	Logger *slog.Logger
	// ClientOptions are passed to the Firestore client (credentials,
	// endpoint). With FIRESTORE_EMULATOR_HOST set the client library talks
	// to the emulator by itself.
	ClientOptions []option.ClientOption
}

// withDefaults returns c with every zero optional field filled.
func (c Config) withDefaults() Config {
	if c.Collection == "" {
		c.Collection = DefaultCollection
	}
	if c.FenceCollection == "" {
		c.FenceCollection = DefaultFenceCollection
	}
	if c.AuditCollection == "" {
		c.AuditCollection = DefaultAuditCollection
	}
	if c.BarrierCollection == "" {
		c.BarrierCollection = DefaultBarrierCollection
	}
	if c.DatabaseID == "(default)" {
		c.DatabaseID = ""
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.AuditRetention = c.AuditRetention.WithDefaults()
	return c
}

// Validate checks c (with defaults applied) and returns an InvalidArgument
// *lockstore.Error naming every problem, so a bad configuration fails at
// startup rather than on the first lock.
func (c Config) Validate() error {
	c = c.withDefaults()
	var probs []string
	if c.ProjectID == "" {
		probs = append(probs, "project ID is required")
	} else if strings.ContainsAny(c.ProjectID, "/ \t\n") {
		probs = append(probs, "project ID must not contain '/' or whitespace")
	}
	if c.DatabaseID != "" && !validDatabaseID(c.DatabaseID) {
		probs = append(probs, fmt.Sprintf("database %q is not a valid database ID (lowercase letters, digits and '-', 4-63 characters, or \"(default)\")", c.DatabaseID))
	}
	for _, f := range []struct{ name, v string }{
		{"collection", c.Collection},
		{"fenceCollection", c.FenceCollection},
		{"auditCollection", c.AuditCollection},
		{"barrierCollection", c.BarrierCollection},
	} {
		if err := validCollectionID(f.v); err != "" {
			probs = append(probs, fmt.Sprintf("%s %q: %s", f.name, f.v, err))
		}
	}
	// Locks and audit events are deleted (release, expiry clean-up,
	// retention); counters never are. Sharing a collection with either
	// would let a delete reach a counter and reissue fences.
	if c.FenceCollection == c.Collection {
		probs = append(probs, "fenceCollection must differ from collection: fence counters are never deleted, lock documents are")
	}
	if c.FenceCollection == c.AuditCollection {
		probs = append(probs, "fenceCollection must differ from auditCollection: audit retention deletes documents")
	}
	if c.AuditCollection == c.Collection {
		probs = append(probs, "auditCollection must differ from collection: audit documents are not locks")
	}
	// Input-class audit events go to auditCollection+"_input", which
	// retention trims as well.
	if in := inputCollection(c.AuditCollection); in == c.FenceCollection || in == c.Collection {
		probs = append(probs, fmt.Sprintf("auditCollection %q puts input audit events in %q, which the lock or fence collection uses", c.AuditCollection, in))
	}
	if c.BarrierCollection == c.Collection || c.BarrierCollection == c.FenceCollection || c.BarrierCollection == c.AuditCollection || c.BarrierCollection == inputCollection(c.AuditCollection) {
		probs = append(probs, "barrierCollection must differ from collection, fenceCollection and auditCollection")
	}
	if len(probs) > 0 {
		return lockstore.Errorf(lockstore.InvalidArgument, "config", "firestore store: %s", strings.Join(probs, "; "))
	}
	return nil
}

// validCollectionID applies Firestore's rules for a collection ID (the same
// as for a document ID): valid UTF-8, at most 1500 bytes, no '/', not "."
// or "..", and not of the reserved form __.*__. It returns "" when valid.
func validCollectionID(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case !utf8.ValidString(id):
		return "must be valid UTF-8"
	case len(id) > 1500:
		return "must be at most 1500 bytes"
	case strings.Contains(id, "/"):
		return "must not contain '/'"
	case id == "." || id == "..":
		return "must not be '.' or '..'"
	case reservedID(id):
		return "must not match the reserved pattern __.*__"
	}
	return ""
}

// validDatabaseID accepts Firestore's named-database rule: 4-63 characters
// of lowercase letters, digits and '-', starting with a letter and not
// ending with '-'.
func validDatabaseID(id string) bool {
	if len(id) < 4 || len(id) > 63 || id[0] < 'a' || id[0] > 'z' || id[len(id)-1] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ParseURL parses a store URL:
//
//	firestore://PROJECT?database=D&collection=C&fenceCollection=F&auditCollection=A
//	    &barrierCollection=B&auditMaxEvents=N&auditMaxAge=168h&maxAttempts=N&fenceFloor=clock|off
//
// Every query parameter is optional; unknown parameters are an error (a
// typo must not silently select a default collection). The result is
// validated. Credentials come from the environment (Application Default
// Credentials), or FIRESTORE_EMULATOR_HOST selects the emulator.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, &lockstore.Error{Code: lockstore.InvalidArgument, Op: "config", Msg: "firestore store URL does not parse"} // url.Error would quote the URL
	}
	if u.Scheme != Scheme {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "store URL scheme is %q, want %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "firestore store URL must not carry credentials; use Application Default Credentials")
	}
	if u.Path != "" && u.Path != "/" {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "firestore store URL takes no path (got %q); use firestore://PROJECT?database=…", u.Path)
	}
	c := Config{ProjectID: u.Host}
	var probs []string
	q := u.Query()
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vals := q[name]
		if len(vals) != 1 {
			probs = append(probs, fmt.Sprintf("parameter %q given %d times", name, len(vals)))
			continue
		}
		v := vals[0]
		switch name {
		case "database":
			c.DatabaseID = v
		case "collection":
			c.Collection = v
		case "fenceCollection":
			c.FenceCollection = v
		case "auditCollection":
			c.AuditCollection = v
		case "barrierCollection":
			c.BarrierCollection = v
		case "auditMaxEvents":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				probs = append(probs, fmt.Sprintf("auditMaxEvents %q must be a positive integer", v))
			}
			c.AuditRetention.MaxEvents = n
		case "auditMaxAge":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				probs = append(probs, fmt.Sprintf("auditMaxAge %q must be a positive Go duration such as 168h", v))
			}
			c.AuditRetention.MaxAge = d
		case "maxAttempts":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				probs = append(probs, fmt.Sprintf("maxAttempts %q must be an integer in [1, 100]", v))
			}
			c.MaxAttempts = n
		case backend.FenceFloorParam:
			f, err := backend.ParseFenceFloor(v)
			if err != nil {
				probs = append(probs, fmt.Sprintf("%s %q must be clock or off", name, v))
			}
			c.FenceFloor = f
		default:
			probs = append(probs, fmt.Sprintf("unknown parameter %q (known: database, collection, fenceCollection, auditCollection, barrierCollection, auditMaxEvents, auditMaxAge, maxAttempts, fenceFloor)", name))
		}
	}
	if len(probs) > 0 {
		return Config{}, lockstore.Errorf(lockstore.InvalidArgument, "config", "firestore store URL: %s", strings.Join(probs, "; "))
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
