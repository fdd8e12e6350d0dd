package redis

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// DefaultPrefix is SyncGuard's default key prefix, so a fleet that already
// locks through the SyncGuard TypeScript library shares locks and fence
// counters with fencegate out of the box.
const DefaultPrefix = "syncguard"

// Connection defaults, applied where the caller left a field zero. They keep a
// dead or partitioned server from holding a call for long even when the
// caller's context has no deadline; a shorter context deadline always wins.
const (
	DefaultDialTimeout  = 2 * time.Second
	DefaultReadTimeout  = 2 * time.Second
	DefaultWriteTimeout = 2 * time.Second
	DefaultPoolTimeout  = 2 * time.Second
)

// Config describes one Redis store.
//
// The zero value is usable: it connects to localhost:6379, database 0, with
// prefix "syncguard".
type Config struct {
	// Options connects to a single Redis server (address, credentials, TLS,
	// database). It is used when Failover is nil; nil means localhost:6379.
	Options *goredis.Options
	// Failover, when set, connects through Redis Sentinel to the master it
	// names, following failovers.
	Failover *goredis.FailoverOptions
	// Cluster, when set, connects to a Redis Cluster through the seed
	// nodes it lists, and implies Layout LayoutCluster (cluster.go).
	Cluster *goredis.ClusterOptions

	// Layout is the key layout: LayoutSyncGuard (the zero value, for one
	// server or Sentinel: SyncGuard's keys byte for byte) or LayoutCluster
	// (every key of one lock under one hash tag, cluster.go). A cluster
	// takes only LayoutCluster; one server may take either (a step on the
	// way to a cluster, docs/redis-cluster.md).
	Layout Layout

	// Prefix namespaces every key the store writes. Empty means
	// DefaultPrefix; trailing ':' are ignored. A prefix that contains
	// "fence:" or ends in "fence" is rejected, because its keys could not be
	// told apart from another prefix's fence counters.
	Prefix string

	// CleanupInIsLocked lets IsLocked delete a lock it finds more than
	// CleanupGuard past its expiry (and that lock's lockId index). Redis
	// already drops keys on their own TTL, so this only matters for lock
	// values written without one. Off by default: IsLocked is then a pure
	// read. Fence counters are never deleted.
	CleanupInIsLocked bool

	// FenceFloor picks the next fence: the zero value, FloorClock, keeps
	// fences growing with Redis's clock so that a failover to a replica
	// that lacked the latest writes, or a restart without persistence,
	// cannot reissue one (backend.FloorLeadMax); FloorOff issues
	// consecutive fences and can.
	FenceFloor backend.FenceFloor

	// AckReplicas > 0 makes every acquire wait until that many replicas
	// have its writes (WAIT), and fail closed otherwise (ack.go): fences
	// then survive a failover with no assumption about clocks. Set it to
	// the number of replicas a failover may promote. Zero: no waiting.
	AckReplicas int
	// AckTimeout bounds that wait; zero means DefaultAckTimeout.
	AckTimeout time.Duration

	// AuditRetention bounds the audit stream; zero fields take the defaults.
	AuditRetention lockstore.AuditRetention

	// Logger receives the store's logs; nil means slog.Default().
	Logger *slog.Logger
}

// CleanupGuard is how far past its expiry a lock must be before the optional
// IsLocked cleanup deletes it. It is twice the liveness tolerance, so a
// cleanup can never race an extend that still sees the lock as live.
const CleanupGuard = 2 * lockstore.TimeToleranceMs * time.Millisecond

// Store URL schemes.
const (
	SchemeRedis          = "redis"
	SchemeRedisTLS       = "rediss"
	SchemeSentinel       = "redis+sentinel"
	SchemeSentinelTLS    = "rediss+sentinel"
	SchemeCluster        = "redis+cluster"
	SchemeClusterTLS     = "rediss+cluster"
	queryLayout          = "layout"
	queryPrefix          = "prefix"
	queryCleanup         = "cleanup"
	queryAuditMaxEvents  = "auditMaxEvents"
	queryAuditMaxAge     = "auditMaxAge"
	queryMaster          = "master"
	queryAck             = "ack"
	queryAckReplicas     = "ackReplicas"
	queryAckTimeout      = "ackTimeout"
	querySentinelUser    = "sentinel_username"
	querySentinelPass    = "sentinel_password"
	defaultSentinelPort  = "26379"
	defaultRedisPort     = "6379"
	sentinelSchemeSuffix = "+sentinel"
	clusterSchemeSuffix  = "+cluster"
)

// ParseURL parses a store URL:
//
//	redis://[user:pass@]host[:port][/db][?prefix=P]
//	rediss://…                                (TLS)
//	redis+sentinel://[user:pass@]host[:port][,host2[:port2]…][/db]?master=NAME[&prefix=P]
//	rediss+sentinel://…                       (TLS to sentinels and servers)
//	redis+cluster://[user:pass@]host:port[,host2:port2…][/][?prefix=P]
//	rediss+cluster://…                        (TLS to every node)
//
// For Sentinel URLs the userinfo authenticates to the Redis servers (like
// in redis:// URLs); sentinel_username and sentinel_password authenticate to
// the sentinels themselves. Sentinel ports default to 26379.
//
// fencegate's own parameters are prefix, cleanup (bool, see
// Config.CleanupInIsLocked), auditMaxEvents and auditMaxAge (a Go
// duration), fenceFloor (clock or off, see Config.FenceFloor), and
// ack=replicas with ackReplicas=N and optionally ackTimeout (a Go duration):
// Config.AckReplicas and Config.AckTimeout; layout (syncguard or cluster,
// see Config.Layout; a cluster URL refuses syncguard). Every other query parameter is handed to go-redis
// (dial_timeout, read_timeout, pool_size, …); unknown ones are an error.
// Errors never echo the URL, which may hold a password.
func ParseURL(raw string) (Config, error) {
	var cfg Config
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return cfg, invalidConfig("store URL has no scheme; want redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://")
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case SchemeRedis, SchemeRedisTLS, SchemeSentinel, SchemeSentinelTLS, SchemeCluster, SchemeClusterTLS:
	default:
		return cfg, invalidConfig("unsupported store URL scheme %q; want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster", scheme)
	}

	// Split the authority off by hand: url.Parse rejects the comma-separated
	// host list of a Sentinel URL.
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	var userinfo *url.Userinfo
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		u, err := url.Parse("x://" + authority[:i+1] + "h")
		if err != nil || u.User == nil {
			return cfg, invalidConfig("store URL has malformed credentials")
		}
		userinfo, hosts = u.User, authority[i+1:]
	}
	tail, err := url.Parse(pathQuery)
	if err != nil {
		return cfg, invalidConfig("store URL has a malformed path or query")
	}
	q := tail.Query()
	if err := takeOwnParams(&cfg, q); err != nil {
		return cfg, err
	}
	// Credentials go to go-redis through the rebuilt URL (or the options),
	// never through an error message.
	tls := scheme == SchemeRedisTLS || scheme == SchemeSentinelTLS || scheme == SchemeClusterTLS
	base := SchemeRedis
	if tls {
		base = SchemeRedisTLS
	}

	if strings.HasSuffix(scheme, clusterSchemeSuffix) {
		return parseClusterURL(cfg, base, userinfo, hosts, tail.Path, q)
	}
	if !strings.HasSuffix(scheme, sentinelSchemeSuffix) {
		if strings.Contains(hosts, ",") {
			return cfg, invalidConfig("a %s:// URL takes one host; use redis+sentinel:// for several", scheme)
		}
		u := &url.URL{Scheme: base, User: userinfo, Host: hosts, Path: tail.Path, RawQuery: q.Encode()}
		opts, err := goredis.ParseURL(u.String())
		if err != nil {
			return cfg, invalidConfig("store URL: %s", redactURLError(err))
		}
		cfg.Options = opts
		return cfg, nil
	}

	master := q.Get(queryMaster)
	q.Del(queryMaster)
	if master == "" {
		return cfg, invalidConfig("a Sentinel store URL needs ?master=NAME")
	}
	sentinelUser, sentinelPass := q.Get(querySentinelUser), q.Get(querySentinelPass)
	q.Del(querySentinelUser)
	q.Del(querySentinelPass)
	addrs, err := splitHosts(hosts, defaultSentinelPort, "Sentinel")
	if err != nil {
		return cfg, err
	}
	// ParseFailoverURL takes the first sentinel as the URL host and the
	// others as addr parameters, and its userinfo would authenticate to the
	// sentinels: rebuild the URL without userinfo and set credentials after.
	q.Set("master_name", master)
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := &url.URL{Scheme: base, Host: addrs[0], Path: tail.Path, RawQuery: q.Encode()}
	fo, err := goredis.ParseFailoverURL(u.String())
	if err != nil {
		return cfg, invalidConfig("store URL: %s", redactURLError(err))
	}
	if userinfo != nil {
		fo.Username = userinfo.Username()
		fo.Password, _ = userinfo.Password()
	}
	fo.SentinelUsername, fo.SentinelPassword = sentinelUser, sentinelPass
	cfg.Failover = fo
	return cfg, nil
}

// takeOwnParams moves fencegate's parameters out of q into cfg.
func takeOwnParams(cfg *Config, q url.Values) error {
	if v, ok := q[queryPrefix]; ok {
		cfg.Prefix = v[len(v)-1]
		q.Del(queryPrefix)
	}
	if v := q.Get(queryCleanup); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalidConfig("store URL: %s must be true or false", queryCleanup)
		}
		cfg.CleanupInIsLocked = b
	}
	q.Del(queryCleanup)
	if v := q.Get(queryAuditMaxEvents); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return invalidConfig("store URL: %s must be a positive integer", queryAuditMaxEvents)
		}
		cfg.AuditRetention.MaxEvents = n
	}
	q.Del(queryAuditMaxEvents)
	if v := q.Get(queryAuditMaxAge); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return invalidConfig("store URL: %s must be a positive duration such as 168h", queryAuditMaxAge)
		}
		cfg.AuditRetention.MaxAge = d
	}
	q.Del(queryAuditMaxAge)
	if v, ok := q[backend.FenceFloorParam]; ok {
		if len(v) != 1 {
			return invalidConfig("store URL: %s given %d times", backend.FenceFloorParam, len(v))
		}
		f, err := backend.ParseFenceFloor(v[0])
		if err != nil {
			return err
		}
		cfg.FenceFloor = f
		q.Del(backend.FenceFloorParam)
	}
	if v, ok := q[queryLayout]; ok {
		if len(v) != 1 {
			return invalidConfig("store URL: %s given %d times", queryLayout, len(v))
		}
		l, err := parseLayout(v[0])
		if err != nil {
			return err
		}
		cfg.Layout = l
		q.Del(queryLayout)
	}
	return takeAckParams(cfg, q)
}

// takeAckParams moves ack, ackReplicas and ackTimeout out of q: ack=replicas
// needs ackReplicas (WAIT needs a number, and "whoever is connected" passes
// when the replicas are cut off), and the other two need ack=replicas.
func takeAckParams(cfg *Config, q url.Values) error {
	for _, name := range []string{queryAck, queryAckReplicas, queryAckTimeout} {
		if len(q[name]) > 1 {
			return invalidConfig("store URL: %s given %d times", name, len(q[name]))
		}
	}
	ack, n, timeout := q.Get(queryAck), q.Get(queryAckReplicas), q.Get(queryAckTimeout)
	q.Del(queryAck)
	q.Del(queryAckReplicas)
	q.Del(queryAckTimeout)
	switch ack {
	case "":
		if n != "" || timeout != "" {
			return invalidConfig("store URL: %s and %s need %s=replicas", queryAckReplicas, queryAckTimeout, queryAck)
		}
		return nil
	case "replicas":
	default:
		return invalidConfig("store URL: %s=%q: the only acknowledgement mode is %s=replicas", queryAck, ack, queryAck)
	}
	r, err := strconv.Atoi(n)
	if err != nil || r < 1 || r > 64 {
		return invalidConfig("store URL: %s=replicas needs %s=N, the number of replicas a failover may promote (1 to 64)", queryAck, queryAckReplicas)
	}
	cfg.AckReplicas = r
	if timeout != "" {
		d, err := time.ParseDuration(timeout)
		if err != nil || d < time.Millisecond || d > MaxAckTimeout {
			return invalidConfig("store URL: %s must be a duration in [1ms, %s], such as 250ms", queryAckTimeout, MaxAckTimeout)
		}
		cfg.AckTimeout = d
	}
	return nil
}

// splitHosts splits a URL's comma-separated host list, giving a host
// without a port the default one; what names the URL kind in errors.
func splitHosts(hosts, port, what string) ([]string, error) {
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, invalidConfig("%s store URL has an empty host in its host list", what)
		}
		if _, _, err := splitHostPort(h); err != nil {
			h += ":" + port
		}
		addrs = append(addrs, h)
	}
	return addrs, nil
}

// splitHostPort is net.SplitHostPort that also insists on a port.
func splitHostPort(h string) (string, string, error) {
	i := strings.LastIndexByte(h, ':')
	if i < 0 || strings.HasSuffix(h, "]") {
		return "", "", errors.New("no port")
	}
	return h[:i], h[i+1:], nil
}

// redactURLError returns err's text without a URL in it: url.Error quotes
// the whole URL, credentials included, and its inner error quotes pieces of
// it ("invalid port \":pa\" after host" when a password holds '#' or '/'),
// so a URL that does not parse is described, never quoted.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return "the URL does not parse (percent-encode any of @ : / ? # in the user name and password)"
	}
	return err.Error()
}

func invalidConfig(format string, args ...any) *lockstore.Error {
	return lockstore.Errorf(lockstore.InvalidArgument, "config", format, args...)
}

// normalizePrefix applies the default and checks a prefix: trailing ':' are
// dropped (MakeStorageKey would drop them anyway), and a prefix whose keys
// would collide with fence counters, or that leaves no room for a hashed
// key, is refused before any I/O.
func normalizePrefix(p string, layout Layout) (string, error) {
	p = strings.TrimRight(p, ":")
	if p == "" {
		// An empty prefix would share the keyspace with everything else in
		// the database and make the audit stream a bare "audit" key; we
		// refuse it rather than guard each collision it allows.
		p = layout.defaultPrefix()
	}
	if !utf8.ValidString(p) {
		return "", invalidConfig("prefix must be valid UTF-8")
	}
	if strings.Contains(p, "fence:") || strings.HasSuffix(p, "fence") {
		return "", invalidConfig("prefix must not contain \"fence:\" or end in \"fence\": its keys would collide with fence counters")
	}
	if strings.HasSuffix(p, strings.TrimSuffix(ownKeyInfix, ":")) {
		// Its SyncGuard keys "<p>:…" would be another prefix's own keys.
		return "", invalidConfig("prefix must not end in %q: its keys would collide with fencegate's own keys of another prefix", strings.TrimSuffix(ownKeyInfix, ":"))
	}
	// The longest storage key we derive is a hashed one: prefix + ":" + 22.
	if _, err := backend.MakeStorageKey(p, strings.Repeat("k", lockstore.MaxKeyLengthBytes),
		backend.RedisKeyLimit, backend.RedisKeyReserve); err != nil {
		return "", invalidConfig("prefix of %d bytes is too long for Redis keys", len(p))
	}
	if layout == LayoutCluster {
		return p, checkClusterPrefix(p)
	}
	return p, nil
}

// clientOptions returns a copy of the connection options with fencegate's
// defaults and invariants applied.
func (c Config) clientOptions() (*goredis.Options, *goredis.FailoverOptions) {
	disabled := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if c.Failover != nil {
		fo := *c.Failover
		fo.MaxRetries = -1
		fo.DialerRetries = 1
		fo.ContextTimeoutEnabled = true
		fo.DialTimeout = orDefault(fo.DialTimeout, DefaultDialTimeout)
		fo.ReadTimeout = orDefault(fo.ReadTimeout, DefaultReadTimeout)
		fo.WriteTimeout = orDefault(fo.WriteTimeout, DefaultWriteTimeout)
		fo.PoolTimeout = orDefault(fo.PoolTimeout, DefaultPoolTimeout)
		return nil, &fo
	}
	var o goredis.Options
	if c.Options != nil {
		o = *c.Options
	}
	// Every store operation is a single attempt (retries live in the Lock
	// helper): a replayed acquire whose first reply was lost would report
	// contention on a lock we hold.
	o.MaxRetries = -1
	// One dial per attempt: a refused connection should fail the call now,
	// not after go-redis's five dials with backoff.
	o.DialerRetries = 1
	// Without this go-redis ignores the caller's deadline on the socket.
	o.ContextTimeoutEnabled = true
	o.DialTimeout = orDefault(o.DialTimeout, DefaultDialTimeout)
	o.ReadTimeout = orDefault(o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = orDefault(o.WriteTimeout, DefaultWriteTimeout)
	o.PoolTimeout = orDefault(o.PoolTimeout, DefaultPoolTimeout)
	// Maintenance push notifications are a Redis Enterprise/Cloud feature;
	// probing for them costs a command on every new connection.
	if o.MaintNotificationsConfig == nil {
		o.MaintNotificationsConfig = disabled
	}
	return &o, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// String describes the config without credentials, for logs.
func (c Config) String() string {
	prefix := c.prefixOrDefault()
	if c.Layout == LayoutCluster && c.Cluster == nil {
		prefix += " layout=cluster"
	}
	switch {
	case c.Cluster != nil:
		return fmt.Sprintf("redis cluster seeds=%s tls=%t prefix=%s layout=cluster",
			strings.Join(c.Cluster.Addrs, ","), c.Cluster.TLSConfig != nil, c.prefixOrDefault())
	case c.Failover != nil:
		return fmt.Sprintf("redis sentinel master=%s sentinels=%s db=%d prefix=%s",
			c.Failover.MasterName, strings.Join(c.Failover.SentinelAddrs, ","), c.Failover.DB, prefix)
	case c.Options != nil:
		return fmt.Sprintf("redis addr=%s db=%d tls=%t prefix=%s", c.Options.Addr, c.Options.DB, c.Options.TLSConfig != nil, prefix)
	default:
		return "redis addr=localhost:6379 db=0 prefix=" + prefix
	}
}
