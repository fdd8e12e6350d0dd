package redis

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// Redis Cluster (redis+cluster://, rediss+cluster://).
//
// A script may only touch keys of one hash slot, so the cluster layout puts
// every key of one lock under one hash tag: the lock, its fence counter, its
// lockId index and its write-barrier entries. The tag is three base64url
// characters, the first 18 bits of SHA-256 of the normalised user key
// (keyTag), and the lockId carries it in its first three characters, so that
// Release, Extend and LookupLockID, which get only the lockId, find the
// index in the lock's slot with no cross-slot read. With the default prefix
// "fencegate", acquiring "resource:123" (tag T) writes:
//
//	fencegate:{T}:resource:123                        lock, SyncGuard's value
//	fencegate:{T}:id:<lockId>                         index (lockId = T + 19 random characters)
//	fencegate:{T}:fence:fencegate:{T}:resource:123    fence counter
//
// What it costs: a lockId keeps its wire shape (22 base64url characters, so
// every client and the API take it unchanged) but holds 110 random bits
// instead of 128 (still far past guessing), and it reveals 18 bits of a
// hash of the key to whoever holds it. SyncGuard cannot share the layout:
// its scripts name keys without hash tags and read the lock key from the
// index without declaring it (CROSSSLOT on a cluster), so a cluster URL
// refuses layout=syncguard, and the default prefix is "fencegate", not
// SyncGuard's. The release and extend scripts still read the lock key they
// find in the index without declaring it; Redis allows that when the key is
// in the slot of the declared ones, which the tag guarantees.
//
// The audit trail is auditShards pairs of streams, each pair under its own
// tag, the tags picked to spread over the slot range (auditShardTags); each
// append batch goes to the next shard, and a query reads every shard and
// merges by event time. No slot is hot with audit writes.

// Layout is a store's key layout (Config.Layout).
type Layout int

const (
	// LayoutDefault is LayoutSyncGuard on one server or Sentinel and
	// LayoutCluster on a cluster.
	LayoutDefault Layout = iota
	// LayoutSyncGuard is SyncGuard's layout, byte for byte (doc.go).
	LayoutSyncGuard
	// LayoutCluster puts every key of one lock under one hash tag.
	LayoutCluster
)

// DefaultClusterPrefix is the cluster layout's default prefix. It is not
// SyncGuard's: SyncGuard cannot lock on a cluster, so nothing would share
// its namespace.
const DefaultClusterPrefix = "fencegate"

// Layout names in the store URL (layout=).
const (
	layoutNameSyncGuard = "syncguard"
	layoutNameCluster   = "cluster"
)

func parseLayout(v string) (Layout, error) {
	switch v {
	case layoutNameSyncGuard:
		return LayoutSyncGuard, nil
	case layoutNameCluster:
		return LayoutCluster, nil
	}
	return 0, invalidConfig("store URL: %s must be %s or %s", queryLayout, layoutNameSyncGuard, layoutNameCluster)
}

func (l Layout) defaultPrefix() string {
	if l == LayoutCluster {
		return DefaultClusterPrefix
	}
	return DefaultPrefix
}

// effectiveLayout resolves LayoutDefault and refuses SyncGuard's layout on
// a cluster.
func (c Config) effectiveLayout() (Layout, error) {
	switch {
	case c.Cluster != nil && c.Layout == LayoutSyncGuard:
		return 0, invalidConfig("SyncGuard's key layout cannot run on Redis Cluster (its scripts touch keys of several slots: CROSSSLOT); a cluster store uses layout=cluster, which SyncGuard clients cannot share")
	case c.Cluster != nil || c.Layout == LayoutCluster:
		return LayoutCluster, nil
	}
	return LayoutSyncGuard, nil
}

func (c Config) prefixOrDefault() string {
	if c.Prefix != "" {
		return c.Prefix
	}
	l, err := c.effectiveLayout()
	if err != nil {
		l = LayoutCluster
	}
	return l.defaultPrefix()
}

// tagLen is the length of a key's hash tag and of the lockId's first part
// that repeats it.
const tagLen = 3

// keyTag is the hash tag of a normalised user key: 18 bits of its SHA-256
// as three base64url characters (262,144 tags over 16,384 slots).
func keyTag(norm string) string {
	sum := sha256.Sum256([]byte(norm))
	return base64.RawURLEncoding.EncodeToString(sum[:3])[:tagLen]
}

// taggedPrefix is the prefix of every key of the locks whose tag is tag.
func (s *Store) taggedPrefix(tag string) string {
	if s.untagged {
		return s.prefix + ":" + tag // the broken variant: no hash tag
	}
	return s.prefix + ":{" + tag + "}"
}

// newTaggedLockID is a fresh lockId whose first characters are tag.
func newTaggedLockID(tag string) (string, error) {
	id, err := lockstore.NewLockID()
	if err != nil {
		return "", err
	}
	return tag + id[tagLen:], nil
}

// checkClusterPrefix refuses a prefix the cluster layout cannot use: one
// with a brace (Redis would take a hash tag from it instead of ours), or
// one long enough that index keys would be hashed (the index is found by
// name from the lockId; the console lists by its pattern).
func checkClusterPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return invalidConfig("a cluster layout prefix must not contain '{' or '}': Redis would take the hash tag from it")
	}
	tp := p + ":{" + strings.Repeat("A", tagLen) + "}"
	id := "id:" + strings.Repeat("A", lockstore.LockIDLength)
	if k, err := backend.MakeStorageKey(tp, id, backend.RedisKeyLimit, backend.RedisKeyReserve); err != nil || k != tp+":"+id {
		return invalidConfig("prefix of %d bytes is too long for the cluster layout's keys", len(p))
	}
	return nil
}

// parseClusterURL builds a cluster Config from a redis+cluster:// URL's
// parts: hosts is the comma-separated seed list (port 6379 by default).
func parseClusterURL(cfg Config, base string, userinfo *url.Userinfo, hosts, path string, q url.Values) (Config, error) {
	if p := strings.Trim(path, "/"); p != "" && p != "0" {
		return cfg, invalidConfig("a cluster store URL takes no database: Redis Cluster has only database 0")
	}
	addrs, err := splitHosts(hosts, defaultRedisPort, "cluster")
	if err != nil {
		return cfg, err
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := &url.URL{Scheme: base, User: userinfo, Host: addrs[0], RawQuery: q.Encode()}
	co, err := goredis.ParseClusterURL(u.String())
	if err != nil {
		return cfg, invalidConfig("store URL: %s", redactURLError(err))
	}
	cfg.Cluster = co
	if _, err := cfg.effectiveLayout(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// clusterOptions is clientOptions for a cluster: the same single-attempt
// rule and timeouts, and never a read from a replica (a replica may lag
// its master: an edge check there could pass a stale fence).
func (c Config) clusterOptions() *goredis.ClusterOptions {
	co := *c.Cluster
	co.MaxRetries = -1
	co.DialerRetries = 1
	co.ContextTimeoutEnabled = true
	co.ReadOnly, co.RouteByLatency, co.RouteRandomly = false, false, false
	// MOVED and ASK are followed by go-redis up to this many times within
	// one call; the dispatcher adds its own bounded retry (retryCluster).
	if co.MaxRedirects == 0 {
		co.MaxRedirects = 5
	}
	// Commands go where their key's slot is, nowhere else: fan-outs are ours.
	co.DisableRoutingPolicies = true
	co.DialTimeout = orDefault(co.DialTimeout, DefaultDialTimeout)
	co.ReadTimeout = orDefault(co.ReadTimeout, DefaultReadTimeout)
	co.WriteTimeout = orDefault(co.WriteTimeout, DefaultWriteTimeout)
	co.PoolTimeout = orDefault(co.PoolTimeout, DefaultPoolTimeout)
	if co.MaintNotificationsConfig == nil {
		co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	return &co
}

// masters returns a client for every master the cluster knows of now
// (one per shard).
func (s *Store) masters(ctx context.Context) ([]*goredis.Client, error) {
	var mu sync.Mutex
	var out []*goredis.Client
	err := s.cluster.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		out = append(out, c)
		mu.Unlock()
		return nil
	})
	return out, err
}

// eachMaster runs fn on every master, one after another, and returns the
// errors joined; on one server it runs fn on the server.
func (s *Store) eachMaster(ctx context.Context, fn func(c *goredis.Client) error) error {
	if s.cluster == nil {
		return fn(s.single)
	}
	ms, err := s.masters(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if err := fn(m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Options().Addr, err))
		}
	}
	return errors.Join(errs...)
}

// pingCluster answers while any master does: a shard that is down fails
// the calls on its own keys (fail closed, per key), and must not take the
// whole gateway out of readiness, which would refuse every other shard's
// keys too.
func (s *Store) pingCluster(ctx context.Context) error {
	ms, err := s.masters(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		err := m.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.Options().Addr, err))
	}
	if len(errs) == 0 {
		return errors.New("the cluster has no master")
	}
	return errors.Join(errs...)
}

// notExecuted reports whether a cluster error guarantees that the script
// did not run, so that sending it again cannot apply it twice: a redirect
// go-redis did not follow to the end (MOVED, ASK), a slot in migration
// whose keys are split between two nodes (TRYAGAIN, or a script that read
// an undeclared key already moved: "non local key"; raised before any of
// our scripts writes but one: readKeyScript may have deleted an expired
// lock first, and running it again deletes nothing more), a cluster that
// lost a master (CLUSTERDOWN), a
// demoted master (READONLY: a replica writes nothing), or a connection
// never made. A timeout or a connection lost mid-call is ambiguous and is
// never retried.
func notExecuted(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY"} {
		if goredis.HasErrorPrefix(err, p) {
			return true
		}
	}
	if strings.Contains(err.Error(), "non local key") || strings.Contains(err.Error(), "not served by this node") {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Cluster retry bounds: a failover or a slot migration shows as errors for
// a moment (a lock's keys half moved answer TRYAGAIN until the last one
// has moved); retryCluster sends a call again at most clusterRetries
// times, the pause doubling from clusterBackoff up to clusterBackoffMax
// (10+20+40+80+160+160 ms), always within the caller's deadline.
const (
	clusterRetries    = 6
	clusterBackoff    = 10 * time.Millisecond
	clusterBackoffMax = 160 * time.Millisecond
)

// auditShards is how many pairs of audit streams a cluster layout keeps.
const auditShards = 8

// auditShardTags are the shards' hash tags: shard i's tag hashes into the
// i-th eighth of the slot range, so on a cluster whose masters own equal
// ranges the shards spread evenly over them.
var auditShardTags = func() [auditShards]string {
	var tags [auditShards]string
	per := clusterSlots / auditShards
	for i := range tags {
		for j := 0; ; j++ {
			t := fmt.Sprintf("audit%d", j)
			if int(keySlot(t))/per == i {
				tags[i] = t
				break
			}
		}
	}
	return tags
}()

// clusterSlots is Redis Cluster's number of hash slots.
const clusterSlots = 16384

// keySlot is Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash
// tag (the text between the first '{' and the next '}', if not empty), or
// of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}

// KeySlot returns the cluster hash slot of a storage key (for tests and
// tooling).
func KeySlot(key string) int { return int(keySlot(key)) }

// ClusterKeySlot returns the hash slot of every key of user key's locks
// under the cluster layout (whatever the prefix: the tag alone decides),
// for tests and tooling that must know which shard a key lives on.
func ClusterKeySlot(key string) (int, error) {
	k, err := normalize(key)
	if err != nil {
		return 0, err
	}
	return int(keySlot("{" + keyTag(k) + "}")), nil
}

// newDispatcher is a dispatcher on the store's client.
func (s *Store) newDispatcher() *dispatcher {
	d := newDispatcher(s.client)
	d.cluster = s.cluster
	d.noRetry = s.noRetry
	return d
}

// dispatcherFor is the dispatcher for a script on keys: on a cluster, the
// one of the master that owns their slot now (a pipeline waits for all its
// nodes: one per node keeps a hung shard's calls apart from the others');
// else, or when the slot map is not known, the store's own. A stale map
// only costs a redirect, which go-redis follows.
func (s *Store) dispatcherFor(ctx context.Context, keys []string) *dispatcher {
	if s.cluster == nil || len(keys) == 0 || s.oneDispatcher {
		return s.d
	}
	node, err := s.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return s.d
	}
	addr := node.Options().Addr
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	if s.closed {
		return s.d // closed: it refuses the call
	}
	d, ok := s.nodeD[addr]
	if !ok {
		if s.nodeD == nil {
			s.nodeD = map[string]*dispatcher{}
		}
		d = s.newDispatcher()
		s.nodeD[addr] = d
	}
	return d
}
