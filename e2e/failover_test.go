package e2e

// Stores that lose writes (issue #18): a Redis master killed after its
// replicas were cut off and Sentinel promoting one of them; a PostgreSQL
// primary killed after its asynchronous standby was cut off and the standby
// promoted; a Redis without persistence restarted; a bolt file restored
// from an earlier copy. Each time the store's fence counters go back to an
// older value. 8 clients acquire and release locks on 4 keys through the
// real gateway the whole time, and every fence handed out is checked per
// key: none repeats, and none is below or equal to a fence whose reply
// arrived before its acquire was sent. Each scenario runs with the fence
// clock floor (the default: it must hold) and with fenceFloor=off (fences
// must repeat: the scenario can catch the bug the floor fixes).
//
// Each failover also checks, with a marker written to the old primary
// before and during the cut, that the promoted copy has the first and
// lacks the second: the scenario did lose writes, in both rows.
//
// FENCEGATE_FAILOVER_ROUNDS=N makes each scenario lose writes N times
// (default 1) for a longer run.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// How long the clients run in each phase of a round.
const (
	phaseBefore = 1500 * time.Millisecond // acquiring on a healthy store
	phaseCut    = 1500 * time.Millisecond // replication cut: writes the copy never gets
	phaseAfter  = 2 * time.Second         // acquiring on the store that lost writes
	// followBound bounds how long the gateway may take to acquire again
	// after the store failed over, restarted or came back.
	followBound = 30 * time.Second
)

// withQuery appends q to base (which has no query).
func withQuery(base string, q url.Values) string {
	if len(q) == 0 {
		return base
	}
	return base + "?" + q.Encode()
}

// logRun logs a scenario's figures in one line, for the closing note.
func logRun(t *testing.T, rounds int, ft fenceTally, took time.Duration, extra string) {
	t.Helper()
	t.Logf("FIGURES %s: rounds=%d acquires=%d repeats=%d backward=%d failed=%d busy=%d longest_gap=%v took=%.1fs%s",
		t.Name(), rounds, ft.Acquires, ft.Repeats, ft.Backward, ft.Failed, ft.Busy, ft.Gap.Round(time.Millisecond), took.Seconds(), extra)
}

// ---- Redis with Sentinel ----

const (
	sentinelMaster = "fg"
	// replicaSourceIP is the address replicas connect to their master from
	// (bind-source-addr), so that a node's front proxy can cut replication
	// while Sentinels, clients and the gateway (from 127.0.0.1) still get
	// through.
	replicaSourceIP = "127.0.0.2"
)

func isReplicaSource(ip string) bool { return ip == replicaSourceIP }

// redisNode is one redis-server behind its front proxy. Everyone —
// replicas, Sentinels, the gateway — reaches the node at the front proxy's
// address (the node announces it with replica-announce-port), so Sentinel
// sees a consistent topology, and the test can cut replication or make the
// host vanish at the proxy.
//
// A proxy only on the replica→master link (replicaof the proxy's port)
// does not survive Sentinel: a replica whose master address differs from
// the one Sentinel monitors is re-pointed at the master itself once
// failover-timeout has passed (+fix-slave-config), and after a failover
// Sentinel points the replicas at the new master's announced address.
// Hence one proxy in front of each node, which tells replication
// connections (from replicaSourceIP) from all others.
type redisNode struct {
	name  string
	dir   string
	port  int // redis-server's own port
	front *tcpProxy
	proc  *proc
}

func newRedisNode(t *testing.T, dir string, i int) *redisNode {
	t.Helper()
	n := &redisNode{name: fmt.Sprintf("redis%d", i), dir: filepath.Join(dir, fmt.Sprintf("redis%d", i)), port: testutil.FreePort(t)}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.front = newTCPProxy(t, fmt.Sprintf("127.0.0.1:%d", n.port))
	return n
}

// start runs redis-server without persistence, as a replica of master
// (through master's front proxy) unless master is nil.
func (n *redisNode) start(t *testing.T, ctx context.Context, master *redisNode) {
	t.Helper()
	args := []string{"redis-server",
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", n.dir,
		"--replica-announce-ip", "127.0.0.1", "--replica-announce-port", strconv.Itoa(n.front.Port()),
		"--bind-source-addr", replicaSourceIP,
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	if master != nil {
		args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(master.front.Port()))
	}
	n.proc = startProc(t, n.name, filepath.Join(n.dir, "redis.log"), args...)
	waitDial(t, ctx, fmt.Sprintf("127.0.0.1:%d", n.port), 15*time.Second)
}

// kill is the host dying: SIGKILL, and its address refuses connections.
func (n *redisNode) kill(t *testing.T) {
	n.proc.kill(t)
	n.front.down()
}

func (n *redisNode) client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: n.front.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
}

// set writes a marker key on the node.
func (n *redisNode) set(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	c := n.client()
	defer c.Close()
	if err := c.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatalf("SET %s on %s: %v", key, n.name, err)
	}
}

// checkHas asserts whether the node has a marker key.
func (n *redisNode) checkHas(t *testing.T, ctx context.Context, key string, want bool) {
	t.Helper()
	c := n.client()
	defer c.Close()
	got, err := c.Exists(ctx, key).Result()
	if err != nil {
		t.Fatalf("EXISTS %s on %s: %v", key, n.name, err)
	}
	if (got == 1) != want {
		t.Fatalf("%s has marker %s: %v, want %v (the scenario did not lose exactly the writes of the cut)", n.name, key, got == 1, want)
	}
}

// waitReplicas waits until master has n replicas online (synced).
func waitReplicas(t *testing.T, ctx context.Context, master *redisNode, n int) {
	t.Helper()
	c := master.client()
	defer c.Close()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s to have %d replicas online", master.name, n), func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Count(info, "state=online") >= n
	})
}

func startSentinels(t *testing.T, ctx context.Context, dir string, master *redisNode, n int) []string {
	t.Helper()
	var addrs []string
	for i := range n {
		port := testutil.FreePort(t)
		d := filepath.Join(dir, fmt.Sprintf("sentinel%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(d, "sentinel.conf")
		// down-after 1 s: the master is subjectively down a second after
		// it dies; failover-timeout 3 s: a failed election is retried
		// soon, and a second failover may start 6 s after the first.
		body := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 3000
sentinel parallel-syncs %s 2
`, port, d, sentinelMaster, master.front.Port(), sentinelMaster, sentinelMaster, sentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		startProc(t, fmt.Sprintf("sentinel%d", i), filepath.Join(d, "sentinel.log"), "redis-sentinel", conf)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		waitDial(t, ctx, addr, 15*time.Second)
		addrs = append(addrs, addr)
	}
	// Every Sentinel must know both replicas and the other Sentinels
	// before the master may die.
	for _, a := range addrs {
		sc := goredis.NewSentinelClient(&goredis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second})
		testutil.WaitFor(t, 30*time.Second, "sentinel "+a+" to know 2 replicas and 2 other sentinels", func() bool {
			m, err := sc.Master(ctx, sentinelMaster).Result()
			return err == nil && m["num-slaves"] == "2" && m["num-other-sentinels"] == strconv.Itoa(n-1)
		})
		sc.Close()
	}
	return addrs
}

// waitPromotion waits until Sentinel names another master than old and
// that node says it is a master; it returns the node.
func waitPromotion(t *testing.T, ctx context.Context, sentinels []string, nodes []*redisNode, old *redisNode) *redisNode {
	t.Helper()
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: sentinels[0], DialTimeout: time.Second, ReadTimeout: time.Second})
	defer sc.Close()
	var promoted *redisNode
	testutil.WaitFor(t, 30*time.Second, "Sentinel to promote a replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
		if err != nil || len(addr) != 2 || addr[1] == strconv.Itoa(old.front.Port()) {
			return false
		}
		for _, n := range nodes {
			if strconv.Itoa(n.front.Port()) == addr[1] {
				promoted = n
			}
		}
		return promoted != nil
	})
	c := promoted.client()
	defer c.Close()
	testutil.WaitFor(t, 30*time.Second, promoted.name+" to become a master", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	return promoted
}

// TestFailoverRedisSentinel: master + 2 replicas + 3 Sentinels; the
// gateway on redis+sentinel://. Each round cuts the replicas off the master
// for 1.5 s while the clients acquire, kills the master (kill -9), and lets
// Sentinel promote a replica that lacks those writes; the gateway follows.
// Between rounds the killed node comes back as a replica of the new master.
func TestFailoverRedisSentinel(t *testing.T) {
	needTool(t, "redis-server", "redis-server")
	needTool(t, "redis-sentinel", "redis-sentinel")
	if ln, err := net.Listen("tcp", replicaSourceIP+":0"); err != nil {
		t.Fatalf("replicas connect from %s, which must be a loopback address (Linux routes all of 127/8 to lo; elsewhere add an alias, e.g. ifconfig lo0 alias %s): %v", replicaSourceIP, replicaSourceIP, err)
	} else {
		ln.Close()
	}
	rounds := failoverRounds(t)
	for _, fc := range floorCases {
		t.Run(fc.name, func(t *testing.T) { testFailoverRedisSentinel(t, fc, rounds) })
	}
}

func testFailoverRedisSentinel(t *testing.T, fc floorCase, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(40+25*rounds)*time.Second)
	defer cancel()
	began := time.Now()
	dir := t.TempDir()
	nodes := []*redisNode{newRedisNode(t, dir, 0), newRedisNode(t, dir, 1), newRedisNode(t, dir, 2)}
	master := nodes[0]
	master.start(t, ctx, nil)
	nodes[1].start(t, ctx, master)
	nodes[2].start(t, ctx, master)
	waitReplicas(t, ctx, master, 2)
	sentinels := startSentinels(t, ctx, dir, master, 3)

	q := fc.params()
	q.Set("master", sentinelMaster)
	g := StartGateway(t, withQuery("redis+sentinel://"+strings.Join(sentinels, ",")+"/0", q), "--log-level", "info")
	load := startFenceLoad(t, g.URL())
	var promotions, follows []string
	for r := range rounds {
		kept, lost := fmt.Sprintf("failover-e2e:kept:%d", r), fmt.Sprintf("failover-e2e:lost:%d", r)
		master.set(t, ctx, kept)
		load.run(ctx, phaseBefore, "before the cut")
		master.front.cut(isReplicaSource)
		load.run(ctx, phaseCut, "while the replicas are cut off")
		master.set(t, ctx, lost)
		master.kill(t)
		killed := time.Now()
		promoted := waitPromotion(t, ctx, sentinels, nodes, master)
		// The promoted replica has what the master wrote before the cut
		// and lacks what it wrote during it: the failover lost writes.
		promoted.checkHas(t, ctx, kept, true)
		promoted.checkHas(t, ctx, lost, false)
		promotions = append(promotions, fmt.Sprintf("%.1fs", time.Since(killed).Seconds()))
		load.waitGrants(ctx, 1, followBound, "the gateway to acquire on the promoted replica")
		follows = append(follows, fmt.Sprintf("%.1fs", time.Since(killed).Seconds()))
		t.Logf("round %d: killed %s, Sentinel promoted %s after %s, the gateway acquired again after %s",
			r+1, master.name, promoted.name, promotions[r], follows[r])
		load.run(ctx, phaseAfter, "after the failover")
		if r+1 < rounds {
			// The dead host comes back, empty, as a replica of the new master.
			master.front.up()
			master.start(t, ctx, promoted)
			waitReplicas(t, ctx, promoted, 2)
		}
		master = promoted
	}
	ft := load.tally()
	logRun(t, rounds, ft, time.Since(began), fmt.Sprintf(" promoted_after=%v acquiring_again_after=%v", promotions, follows))
	ft.check(t, fc)
}

// ---- PostgreSQL primary + asynchronous streaming standby ----

// pgBinDir is where PostgreSQL 15's programs are (PG_BIN overrides).
func pgBinDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PG_BIN")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	for _, p := range []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("PostgreSQL 15 program %s not found in %s (or set PG_BIN): install it (apt-get install -y postgresql-15)", p, dir)
		}
	}
	return dir
}

// pgCluster runs PostgreSQL servers in one directory, as the postgres user
// when the test runs as root (PostgreSQL refuses to run as root).
type pgCluster struct {
	bin, base string
	asRoot    bool
	uid, gid  int
}

func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	c := &pgCluster{bin: pgBinDir(t), base: t.TempDir(), asRoot: os.Geteuid() == 0}
	if c.asRoot {
		if _, err := exec.LookPath("runuser"); err != nil {
			t.Fatalf("running as root needs runuser to start PostgreSQL as postgres: install it (apt-get install -y util-linux)")
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no postgres user to run PostgreSQL as: install it (apt-get install -y postgresql-15 creates it): %v", err)
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
		// The postgres user must get into t.TempDir() (made 0700 for root)
		// and own the directory its clusters live in.
		for _, d := range []string{filepath.Dir(c.base), c.base} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(c.base, c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// run runs one of PostgreSQL's programs (from /, which every user may enter).
func (c *pgCluster) run(t *testing.T, prog string, args ...string) {
	t.Helper()
	argv := append([]string{filepath.Join(c.bin, prog)}, args...)
	if c.asRoot {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

type pgNode struct {
	name, dir string
	port      int
}

func (c *pgCluster) node(name string, port int) *pgNode {
	return &pgNode{name: name, dir: filepath.Join(c.base, name), port: port}
}

// configure appends settings to the node's postgresql.conf (later lines win).
func (c *pgCluster) configure(t *testing.T, n *pgNode) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// fsync off: a kill loses what the server had not sent, not what the
	// OS had not written, and initdb/start stay fast.
	if _, err := fmt.Fprintf(f, "\n# e2e failover test\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nfull_page_writes = off\nmax_connections = 100\nwal_level = replica\nmax_wal_senders = 4\n", n.port); err != nil {
		t.Fatal(err)
	}
}

func (c *pgCluster) start(t *testing.T, n *pgNode) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", n.dir, "-l", filepath.Join(c.base, n.name+".log"), "-w", "-t", "30", "start")
	t.Cleanup(func() {
		c.stopQuiet(n)
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", n.name, tailFile(filepath.Join(c.base, n.name+".log"), 30))
		}
	})
}

// kill is an immediate shutdown: the postmaster and every backend exit at
// once, nothing more is sent to anyone.
func (c *pgCluster) kill(t *testing.T, n *pgNode) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", n.dir, "-m", "immediate", "-w", "-t", "30", "stop")
}

func (c *pgCluster) stopQuiet(n *pgNode) {
	argv := []string{filepath.Join(c.bin, "pg_ctl"), "-D", n.dir, "-m", "immediate", "-w", "-t", "30", "stop"}
	if c.asRoot {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	_ = cmd.Run()
}

func (c *pgCluster) initPrimary(t *testing.T, n *pgNode) {
	t.Helper()
	c.run(t, "initdb", "-A", "trust", "-U", "postgres", "-N", "--no-instructions", "-D", n.dir)
	c.configure(t, n)
	c.start(t, n)
}

// initStandby clones primaryAddr (reached through the proxy the test cuts)
// into n, with primary_conninfo pointing at that address, and starts it.
func (c *pgCluster) initStandby(t *testing.T, n *pgNode, via *tcpProxy) {
	t.Helper()
	if err := os.RemoveAll(n.dir); err != nil {
		t.Fatal(err)
	}
	c.run(t, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(via.Port()), "-U", "postgres",
		"-D", n.dir, "-R", "-X", "stream", "-c", "fast", "-N")
	c.configure(t, n)
	c.start(t, n)
}

// waitStreaming waits until primary streams to a standby.
func waitStreaming(t *testing.T, ctx context.Context, primary *pgNode) {
	t.Helper()
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", primary.port)
	testutil.WaitFor(t, 30*time.Second, primary.name+" to stream to its standby", func() bool {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var n int
		err = conn.QueryRow(ctx, "select count(*) from pg_stat_replication where state = 'streaming'").Scan(&n)
		return err == nil && n >= 1
	})
}

func pgConnect(t *testing.T, ctx context.Context, n *pgNode) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", n.port))
	if err != nil {
		t.Fatalf("connect to %s: %v", n.name, err)
	}
	return conn
}

// pgExec runs a statement on the node.
func pgExec(t *testing.T, ctx context.Context, n *pgNode, sql string) {
	t.Helper()
	conn := pgConnect(t, ctx, n)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s on %s: %v", sql, n.name, err)
	}
}

// pgCheckTable asserts whether the node has a marker table.
func pgCheckTable(t *testing.T, ctx context.Context, n *pgNode, table string, want bool) {
	t.Helper()
	conn := pgConnect(t, ctx, n)
	defer conn.Close(ctx)
	var got bool
	if err := conn.QueryRow(ctx, "select to_regclass($1) is not null", table).Scan(&got); err != nil {
		t.Fatalf("look for table %s on %s: %v", table, n.name, err)
	}
	if got != want {
		t.Fatalf("%s has table %s: %v, want %v (the scenario did not lose exactly the writes of the cut)", n.name, table, got, want)
	}
}

// TestFailoverPostgres: a PostgreSQL 15 primary and an asynchronous
// streaming standby (pg_basebackup -R) that replicates through a proxy; the
// gateway on a multi-host DSN with target_session_attrs=read-write. Each
// round cuts the standby off for 1.5 s while the clients acquire, kills the
// primary (immediate shutdown), and promotes the standby; the gateway
// follows to it. Between rounds the dead primary's host is rebuilt as a
// standby of the new primary.
func TestFailoverPostgres(t *testing.T) {
	pgBinDir(t)
	rounds := failoverRounds(t)
	for _, fc := range floorCases {
		t.Run(fc.name, func(t *testing.T) { testFailoverPostgres(t, fc, rounds) })
	}
}

func testFailoverPostgres(t *testing.T, fc floorCase, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(40+25*rounds)*time.Second)
	defer cancel()
	began := time.Now()
	c := newPGCluster(t)
	primary, standby := c.node("pg_a", testutil.FreePort(t)), c.node("pg_b", testutil.FreePort(t))
	c.initPrimary(t, primary)
	link := newTCPProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.port))
	c.initStandby(t, standby, link)
	waitStreaming(t, ctx, primary)

	q := fc.params()
	q.Set("sslmode", "disable")
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	dsn := withQuery(fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres", primary.port, standby.port), q)
	g := StartGateway(t, dsn, "--log-level", "info")
	load := startFenceLoad(t, g.URL())
	var follows []string
	for r := range rounds {
		kept, lost := fmt.Sprintf("failover_e2e_kept_%d", r), fmt.Sprintf("failover_e2e_lost_%d", r)
		pgExec(t, ctx, primary, "create table "+kept+" ()")
		load.run(ctx, phaseBefore, "before the cut")
		link.cut(func(string) bool { return true })
		load.run(ctx, phaseCut, "while the standby is cut off")
		pgExec(t, ctx, primary, "create table "+lost+" ()")
		c.kill(t, primary)
		killed := time.Now()
		c.run(t, "pg_ctl", "-D", standby.dir, "-w", "-t", "30", "promote")
		promoted := time.Since(killed)
		// The promoted standby has what the primary committed before the
		// cut and lacks what it committed during it: the failover lost
		// writes.
		pgCheckTable(t, ctx, standby, kept, true)
		pgCheckTable(t, ctx, standby, lost, false)
		load.waitGrants(ctx, 1, followBound, "the gateway to acquire on the promoted standby")
		follows = append(follows, fmt.Sprintf("%.1fs", time.Since(killed).Seconds()))
		t.Logf("round %d: killed %s, promoted %s in %.1fs, the gateway acquired again after %s",
			r+1, primary.name, standby.name, promoted.Seconds(), follows[r])
		load.run(ctx, phaseAfter, "after the failover")
		primary, standby = standby, primary
		if r+1 < rounds {
			link = newTCPProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.port))
			c.initStandby(t, standby, link)
			waitStreaming(t, ctx, primary)
		}
	}
	ft := load.tally()
	logRun(t, rounds, ft, time.Since(began), fmt.Sprintf(" acquiring_again_after=%v", follows))
	ft.check(t, fc)
}

// ---- Redis without persistence, restarted ----

// TestRestartRedisWithoutPersistence: one redis-server without
// persistence (no RDB saves, no AOF), killed (kill -9) and started again on the same port
// while the clients acquire: it comes back empty.
func TestRestartRedisWithoutPersistence(t *testing.T) {
	needTool(t, "redis-server", "redis-server")
	rounds := failoverRounds(t)
	for _, fc := range floorCases {
		t.Run(fc.name, func(t *testing.T) { testRestartRedis(t, fc, rounds) })
	}
}

func testRestartRedis(t *testing.T, fc floorCase, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(30+15*rounds)*time.Second)
	defer cancel()
	began := time.Now()
	dir := t.TempDir()
	port := testutil.FreePort(t)
	start := func() *proc {
		p := startProc(t, "redis", filepath.Join(dir, "redis.log"), "redis-server",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		waitDial(t, ctx, fmt.Sprintf("127.0.0.1:%d", port), 15*time.Second)
		return p
	}
	srv := start()
	g := StartGateway(t, withQuery(fmt.Sprintf("redis://127.0.0.1:%d/0", port), fc.params()), "--log-level", "info")
	load := startFenceLoad(t, g.URL())
	rdb := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DialTimeout: time.Second, MaxRetries: 3})
	defer rdb.Close()
	for r := range rounds {
		load.run(ctx, phaseBefore+phaseCut, "before the restart")
		if err := rdb.Set(ctx, "failover-e2e:lost", "1", 0).Err(); err != nil {
			t.Fatalf("SET marker: %v", err)
		}
		srv.kill(t)
		killed := time.Now()
		srv = start()
		// It came back empty: the restart lost every write.
		if n, err := rdb.Exists(ctx, "failover-e2e:lost").Result(); err != nil || n != 0 {
			t.Fatalf("restarted Redis: EXISTS marker = %d, %v; want 0 (it should come back empty)", n, err)
		}
		load.waitGrants(ctx, 1, followBound, "the gateway to acquire on the restarted Redis")
		t.Logf("round %d: Redis killed and restarted, the gateway acquired again after %.1fs", r+1, time.Since(killed).Seconds())
		load.run(ctx, phaseAfter, "after the restart")
	}
	ft := load.tally()
	logRun(t, rounds, ft, time.Since(began), "")
	ft.check(t, fc)
}

// ---- bolt file restored from a backup ----

// TestRestoreBoltBackup: the embedded bolt store; the clients acquire, the
// file is copied ("last night's backup"), they acquire more, the gateway
// is stopped, the copy put back, and the gateway started again.
func TestRestoreBoltBackup(t *testing.T) {
	rounds := failoverRounds(t)
	for _, fc := range floorCases {
		t.Run(fc.name, func(t *testing.T) { testRestoreBolt(t, fc, rounds) })
	}
}

func testRestoreBolt(t *testing.T, fc floorCase, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(30+15*rounds)*time.Second)
	defer cancel()
	began := time.Now()
	dir := t.TempDir()
	db, backup := filepath.Join(dir, "fencegate.db"), filepath.Join(dir, "backup.db")
	storeURL := withQuery("bolt://"+db, fc.params())
	g := StartGateway(t, storeURL, "--log-level", "info")
	load := startFenceLoad(t, g.URL())
	for r := range rounds {
		load.run(ctx, phaseBefore, "before the backup")
		// The backup is taken between transactions: no acquire in flight.
		load.pause()
		copyFile(t, db, backup)
		load.resume()
		checkBolt(t, backup)
		load.run(ctx, phaseCut, "after the backup")
		g.Stop(t)
		copyFile(t, backup, db)
		stopped := time.Now()
		g = StartGateway(t, storeURL, "--log-level", "info")
		load.setGateway(g.URL())
		load.waitGrants(ctx, 1, followBound, "the gateway to acquire on the restored file")
		t.Logf("round %d: restored the backup, the gateway acquired again after %.1fs", r+1, time.Since(stopped).Seconds())
		load.run(ctx, phaseAfter, "after the restore")
	}
	ft := load.tally()
	logRun(t, rounds, ft, time.Since(began), "")
	ft.check(t, fc)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkBolt makes sure the copy is a sound bolt file.
func checkBolt(t *testing.T, path string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("backup %s does not open: %v", path, err)
	}
	defer b.Close()
	if err := b.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	}); err != nil {
		t.Fatalf("backup %s is not consistent: %v", path, err)
	}
}
