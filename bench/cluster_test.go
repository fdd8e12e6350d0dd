package bench

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lock"
	redisstore "github.com/fencegate/fencegate/lockstore/redis"
)

// BenchmarkRedisCluster (issue #30): acquire+release cycles in-process on
// one Redis server (REDIS_URL, SyncGuard's layout: the floor), on a Redis
// Cluster of one master and on one of three masters (both started here,
// no replicas, so the two differ only in the number of shards); and
// ext_authz checks through the `fencegate serve` binary on one server and
// on the three-master cluster.
func BenchmarkRedisCluster(b *testing.B) { runSuite(b, clusterSuite) }

// startBenchCluster starts n cluster-enabled redis-servers, gives them the
// slot range in equal parts, waits for cluster_state:ok everywhere and
// returns a redis+cluster:// URL naming them all.
func startBenchCluster(tb testing.TB, n int) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ready := func(line string) map[string]string {
		if strings.Contains(line, "Ready to accept connections") {
			return map[string]string{}
		}
		return nil
	}
	var addrs []string
	var clients []*goredis.Client
	var ports, buses []int
	for range n {
		port, bus := freePort(tb), freePort(tb)
		dir := tb.TempDir()
		startProc(tb, nil, ready, "redis-server", "--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus),
			"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--cluster-enabled", "yes",
			"--cluster-config-file", dir+"/nodes.conf", "--cluster-announce-ip", "127.0.0.1")
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		tb.Cleanup(func() { _ = c.Close() })
		addrs, clients, ports, buses = append(addrs, addr), append(clients, c), append(ports, port), append(buses, bus)
	}
	for i := 1; i < n; i++ {
		if err := clients[0].Do(ctx, "cluster", "meet", "127.0.0.1", ports[i], buses[i]).Err(); err != nil {
			tb.Fatalf("cluster meet: %v", err)
		}
	}
	per := 16384 / n
	for i, c := range clients {
		hi := (i+1)*per - 1
		if i == n-1 {
			hi = 16383
		}
		if err := c.Do(ctx, "cluster", "addslotsrange", i*per, hi).Err(); err != nil {
			tb.Fatalf("cluster addslotsrange: %v", err)
		}
	}
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("the bench cluster did not reach cluster_state:ok: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// freePort is a free loopback port for a child process.
func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// openClusterStore opens the store on a cluster URL under the run's prefix.
func openClusterStore(tb testing.TB, raw string) *redisstore.Store {
	tb.Helper()
	cfg, err := redisstore.ParseURL(raw)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Prefix = clusterBenchPrefix
	cfg.Logger = logger
	s, err := redisstore.Open(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("open cluster store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// clusterSuite: the one-server floor first, then one master, then three;
// then ext_authz on one server and on three masters.
func clusterSuite(tb testing.TB, nw int) []subject {
	one := openRedis(tb)
	url1 := startBenchCluster(tb, 1)
	url3 := startBenchCluster(tb, 3)
	c1, c3 := openClusterStore(tb, url1), openClusterStore(tb, url3)

	reqs1, _ := heldWrites(tb, one, nw)
	reqs3, _ := heldWrites(tb, c3, nw)
	fg1 := startFencegateServe(tb, one)
	fg3 := startFencegateServeURL(tb, url3+"?prefix="+clusterBenchPrefix)
	return []subject{
		{id: "cluster/one-node", unit: "cycles/s", redis: one.Client(), op: cycle(lock.FromStore(one), workerKeys("cluster/one-node", nw))},
		{id: "cluster/one-master", unit: "cycles/s", op: cycle(lock.FromStore(c1), workerKeys("cluster/one-master", nw))},
		{id: "cluster/three-masters", unit: "cycles/s", op: cycle(lock.FromStore(c3), workerKeys("cluster/three-masters", nw))},
		{id: "cluster/authz-one-node", unit: "checks/s", redis: one.Client(), server: fg1.pids,
			op: checkOp(authv3.NewAuthorizationClient(dialGRPC(tb, fg1.addr["authz"])), reqs1)},
		{id: "cluster/authz-three-masters", unit: "checks/s", server: fg3.pids,
			op: checkOp(authv3.NewAuthorizationClient(dialGRPC(tb, fg3.addr["authz"])), reqs3)},
	}
}

// clusterBenchPrefix is the prefix on the clusters this benchmark starts
// (throwaway: nothing else uses them).
var clusterBenchPrefix = "fgbench-" + runID
