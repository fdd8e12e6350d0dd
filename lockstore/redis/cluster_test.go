package redis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

// clusterURL returns REDIS_CLUSTER_URL or fails (skips under -short, the
// unit tier): these tests need a real cluster (scripts/testenv starts
// three masters and three replicas).
func clusterURL(tb testing.TB) string {
	tb.Helper()
	return testutil.Env(tb, "REDIS_CLUSTER_URL", "a Redis Cluster",
		"run the tests with `make test` or scripts/testenv (it starts a throwaway Redis Cluster of three masters and three replicas)")
}

// openCluster opens a store on REDIS_CLUSTER_URL with prefix.
func openCluster(tb testing.TB, prefix string, mod ...func(*Config)) *Store {
	tb.Helper()
	return openOn(tb, clusterURL(tb), prefix, mod...)
}

// keysPerMaster counts, on every master, the keys matching pattern.
func keysPerMaster(tb testing.TB, s *Store, pattern string) map[string]int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, err := s.masters(ctx)
	if err != nil {
		tb.Fatalf("masters: %v", err)
	}
	out := map[string]int{}
	for _, m := range ms {
		iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
		n := 0
		for iter.Next(ctx) {
			n++
		}
		if err := iter.Err(); err != nil {
			tb.Fatalf("scan %s: %v", m.Options().Addr, err)
		}
		out[m.Options().Addr] = n
	}
	return out
}

// dropCluster deletes every key matching pattern on every master.
func dropCluster(tb testing.TB, s *Store, pattern string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, err := s.masters(ctx)
	if err != nil {
		tb.Logf("cleanup: %v", err)
		return
	}
	for _, m := range ms {
		iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			_ = m.Del(ctx, iter.Val()).Err() // one key: no CROSSSLOT
		}
	}
}

// TestClusterConformance runs the conformance suite on a real cluster of
// three masters and three replicas, and asserts that the suite's keys were
// spread over every master (so every case ran on more than one shard's
// scripts, not on one node by luck of the hash).
func TestClusterConformance(t *testing.T) {
	clusterURL(t)
	storetest.Run(t, conformanceHarness(openCluster, "fgc_", nil))
	s := openCluster(t, "fgc_cleanup")
	spread := keysPerMaster(t, s, "fgc_*")
	t.Logf("the suite's keys per master: %v", spread)
	if len(spread) != 3 {
		t.Errorf("the cluster has %d masters; the test environment starts 3", len(spread))
	}
	for addr, n := range spread {
		if n == 0 {
			t.Errorf("master %s holds none of the suite's keys: the suite did not run on every shard (%v)", addr, spread)
		}
	}
	dropCluster(t, s, "fgc_*")
}

// TestClusterLayout: every key of one lock is in one slot (the lock, its
// fence counter, its lockId index and its barrier entries), the lockId
// carries the key's tag, and the locks of many keys spread over the three
// masters.
func TestClusterLayout(t *testing.T) {
	s := openCluster(t, "fgc_layout")
	t.Cleanup(func() { dropCluster(t, s, "fgc_layout*") })
	ctx := t.Context()
	for i := range 60 {
		key := fmt.Sprintf("orders/%d", i)
		r, err := s.Acquire(ctx, key, 10*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("Acquire(%s) = %+v, %v", key, r, err)
		}
		norm, _ := lockstore.NormalizeKey(key)
		lk, fk, _ := s.keys(norm)
		ik, _ := s.IndexKey(r.LockID)
		_, dk, fik := s.barrierKeys(lk)
		if r.LockID[:tagLen] != keyTag(norm) {
			t.Errorf("lockId of %s does not start with its tag", key)
		}
		slot := keySlot(lk)
		for _, k := range []string{fk, ik, dk, fik} {
			if keySlot(k) != slot {
				t.Errorf("%s is in slot %d, its lock %s in %d", k, keySlot(k), lk, slot)
			}
		}
		// Our CRC16 agrees with the server's.
		if got, err := s.cluster.ClusterKeySlot(ctx, lk).Result(); err != nil || got != int64(slot) {
			t.Errorf("CLUSTER KEYSLOT %s = %d, %v; keySlot says %d", lk, got, err, slot)
		}
		if rr, err := s.Release(ctx, r.LockID); err != nil || !rr.OK {
			t.Errorf("Release(%s) = %+v, %v", key, rr, err)
		}
	}
	spread := keysPerMaster(t, s, "fgc_layout:*")
	for addr, n := range spread {
		if n == 0 {
			t.Errorf("master %s holds no key of 60 locks: %v", addr, spread)
		}
	}
	// The audit shards' tags cover the slot range evenly.
	seen := map[int]bool{}
	for _, tag := range auditShardTags {
		seen[int(keySlot(tag))*auditShards/clusterSlots] = true
	}
	if len(seen) != auditShards {
		t.Errorf("audit shard tags fall in %d of %d slot ranges: %v", len(seen), auditShards, auditShardTags)
	}
}

// TestClusterWithoutHashTags is the broken variant: the same store with the
// hash tags taken out of the key names. Its scripts then touch keys of
// several slots, and the cluster refuses them (CROSSSLOT): the layout test
// above is what keeps them in one.
func TestClusterWithoutHashTags(t *testing.T) {
	s := openCluster(t, "fgc_untagged")
	t.Cleanup(func() { dropCluster(t, s, "fgc_untagged*") })
	s.untagged = true
	crossslot := 0
	for i := range 10 {
		_, err := s.Acquire(t.Context(), fmt.Sprintf("orders/%d", i), 10*time.Second)
		if err != nil && strings.Contains(err.Error(), "CROSSSLOT") {
			crossslot++
		}
	}
	if crossslot == 0 {
		t.Fatal("without hash tags, no acquire failed with CROSSSLOT: the cluster does not catch a layout that spreads a lock's keys")
	}
	t.Logf("without hash tags: %d of 10 acquires refused with CROSSSLOT", crossslot)
}

// TestClusterAudit: audit batches spread over the shards, and a query
// lists across all of them, merged by event time.
func TestClusterAudit(t *testing.T) {
	s := openCluster(t, "fgc_audit")
	t.Cleanup(func() { dropCluster(t, s, "fgc_audit*") })
	ctx := t.Context()
	base := time.Now().UnixMilli() - 1000
	for i := range 2 * auditShards {
		ev := lockstore.AuditEvent{TimeMs: base + int64(i), DecisionID: fmt.Sprintf("d-%d", i), Source: "authz-grpc",
			KeyHash: lockstore.HashKey("k"), KeyDigest: lockstore.DigestKey("k").String(), Reason: "stale", Policy: "holder", Mode: "enforce"}
		if err := s.AppendAudit(ctx, []lockstore.AuditEvent{ev}); err != nil {
			t.Fatalf("AppendAudit: %v", err)
		}
	}
	for _, shard := range s.audit {
		if n := s.cluster.XLen(ctx, shard[0]).Val(); n != 2 {
			t.Errorf("shard %s holds %d events; want 2 (batches go round the shards)", shard[0], n)
		}
	}
	got, err := s.QueryAudit(ctx, lockstore.AuditQuery{Key: "k", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*auditShards {
		t.Fatalf("QueryAudit found %d events; want %d", len(got), 2*auditShards)
	}
	for i, ev := range got {
		if want := fmt.Sprintf("d-%d", 2*auditShards-1-i); ev.DecisionID != want {
			t.Errorf("event %d = %s; want %s (newest first across shards)", i, ev.DecisionID, want)
		}
	}
}

// TestClusterURL: the cluster schemes parse, carry the seeds and TLS, and a
// configuration that claims SyncGuard's layout on a cluster is refused.
func TestClusterURL(t *testing.T) {
	cfg, err := ParseURL("rediss+cluster://u:p@h1:7000,h2:7001,h3/?prefix=app&fenceFloor=off&ack=replicas&ackReplicas=1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster == nil || strings.Join(cfg.Cluster.Addrs, ",") != "h1:7000,h2:7001,h3:6379" || cfg.Cluster.TLSConfig == nil ||
		cfg.Cluster.Username != "u" || cfg.Cluster.Password != "p" || cfg.Prefix != "app" || cfg.AckReplicas != 1 || cfg.FenceFloor != backend.FloorOff {
		t.Errorf("ParseURL = %+v / %+v", cfg, cfg.Cluster)
	}
	if l, _ := cfg.effectiveLayout(); l != LayoutCluster {
		t.Errorf("layout = %v; want cluster", l)
	}
	for _, bad := range []string{
		"redis+cluster://h1:7000?layout=syncguard",
		"redis+cluster://h1:7000/3",
		"redis+cluster://h1:7000,,h2:7001",
		"redis+cluster://h1:7000?layout=other",
		"redis+cluster://h1:7000?nonsense=1",
	} {
		if _, err := ParseURL(bad); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("ParseURL(%q) = %v; want InvalidArgument", bad, err)
		}
	}
	if _, err := Open(t.Context(), Config{Cluster: &goredis.ClusterOptions{Addrs: []string{"h:1"}}, Layout: LayoutSyncGuard}); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Errorf("Open(cluster, layout=syncguard) = %v; want InvalidArgument", err)
	}
	if _, err := Open(t.Context(), Config{Cluster: &goredis.ClusterOptions{Addrs: []string{"h:1"}}, Prefix: "a{b}"}); lockstore.CodeOf(err) != lockstore.InvalidArgument {
		t.Errorf("Open(cluster, prefix with a brace) = %v; want InvalidArgument", err)
	}
	// One server may take the cluster layout (a step towards a cluster).
	if cfg, err := ParseURL("redis://h:6379/0?layout=cluster"); err != nil || cfg.Layout != LayoutCluster {
		t.Errorf("ParseURL(redis://…?layout=cluster) = %+v, %v", cfg, err)
	}
}

// TestClusterAckReplicas: with ack=replicas the WAIT goes to the master
// that owns the key's slot and counts its own replica: every acquire over
// keys on all three shards is acknowledged by one replica.
func TestClusterAckReplicas(t *testing.T) {
	s := openCluster(t, "fgc_ack", func(c *Config) { c.AckReplicas = 1; c.AckTimeout = 500 * time.Millisecond })
	t.Cleanup(func() { dropCluster(t, s, "fgc_ack*") })
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Go(func() {
			r, err := s.Acquire(t.Context(), fmt.Sprintf("k%d", i), 5*time.Second)
			if err != nil || !r.OK {
				errs <- fmt.Errorf("Acquire(k%d) = %+v, %v", i, r, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Asking for two replicas where each shard has one fails closed.
	s2 := openCluster(t, "fgc_ack", func(c *Config) { c.AckReplicas = 2; c.AckTimeout = 50 * time.Millisecond })
	if r, err := s2.Acquire(t.Context(), "k-two", 5*time.Second); lockstore.CodeOf(err) != lockstore.ServiceUnavailable {
		t.Errorf("Acquire with ackReplicas=2 on one-replica shards = %+v, %v; want ServiceUnavailable", r, err)
	}
	rep, err := s.Replication(t.Context())
	if err != nil || rep.Mode != lockstore.ReplicationSynchronous {
		t.Errorf("Replication = %+v, %v; want synchronous", rep, err)
	}
}

// TestClusterShardStall: one master of the shared cluster stops answering
// for a while (CLIENT PAUSE ALL: its connections stay open, its replies
// wait). Calls on its keys fail at their deadline; calls on the other
// masters' keys, sent at the same time, must all succeed. The broken
// variant sends every call through one dispatcher, whose pipelines mix
// the shards' calls: the healthy calls wait for the stalled node and miss
// their deadline.
func TestClusterShardStall(t *testing.T) {
	for _, tc := range []struct {
		name          string
		oneDispatcher bool
	}{{"per_master", false}, {"one_dispatcher_broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openCluster(t, "fgc_stall")
			s.oneDispatcher = tc.oneDispatcher
			ctx := t.Context()
			ms, err := s.masters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stalled := ms[0]
			var stalledKeys, healthyKeys []string
			for i := 0; len(stalledKeys) < 4 || len(healthyKeys) < 8; i++ {
				k := fmt.Sprintf("stall/%d", i)
				lk, _ := s.LockKey(k)
				m, err := s.cluster.MasterForKey(ctx, lk)
				if err != nil {
					t.Fatal(err)
				}
				if m.Options().Addr == stalled.Options().Addr {
					if len(stalledKeys) < 4 {
						stalledKeys = append(stalledKeys, k)
					}
				} else if len(healthyKeys) < 8 {
					healthyKeys = append(healthyKeys, k)
				}
			}
			// Warm every master's connections first.
			for _, k := range append(stalledKeys, healthyKeys...) {
				if _, err := s.Inspect(ctx, k); err != nil {
					t.Fatalf("Inspect(%s): %v", k, err)
				}
			}
			if err := stalled.Do(ctx, "client", "pause", 1200, "all").Err(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var healthyFailed, healthyOK, stalledFailed int
			var wg sync.WaitGroup
			run := func(keys []string, healthy bool) {
				end := time.Now().Add(800 * time.Millisecond)
				for i := 0; time.Now().Before(end); i++ {
					cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
					_, err := s.Inspect(cctx, keys[i%len(keys)])
					cancel()
					mu.Lock()
					switch {
					case healthy && err != nil:
						healthyFailed++
					case healthy:
						healthyOK++
					case err != nil:
						stalledFailed++
					}
					mu.Unlock()
				}
			}
			for w := range 8 {
				wg.Go(func() { run(healthyKeys[w:w+1], true) })
			}
			for w := range 4 {
				wg.Go(func() { run(stalledKeys[w:w+1], false) })
			}
			wg.Wait()
			// Let the pause end before the next subtest.
			time.Sleep(500 * time.Millisecond)
			t.Logf("healthy shards: %d ok, %d failed; stalled shard: %d failed", healthyOK, healthyFailed, stalledFailed)
			if stalledFailed == 0 {
				t.Fatal("no call on the stalled master failed: it was not stalled")
			}
			switch {
			case !tc.oneDispatcher && healthyFailed != 0:
				t.Errorf("%d calls on the other masters' keys failed while one master stalled; want none", healthyFailed)
			case tc.oneDispatcher && healthyFailed == 0:
				t.Errorf("the broken variant (one dispatcher) lost no healthy call: the test cannot tell a stall that spreads")
			}
		})
	}
}

// TestClusterDocURLs: every store URL docs/redis-cluster.md shows parses,
// as what it says it is.
func TestClusterDocURLs(t *testing.T) {
	b, err := os.ReadFile("../../docs/redis-cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "redis+cluster://") && !strings.HasPrefix(line, "rediss+cluster://") {
			continue
		}
		n++
		cfg, err := ParseURL(line)
		if err != nil || cfg.Cluster == nil {
			t.Errorf("ParseURL(%q) = %+v, %v", line, cfg, err)
		}
	}
	if cfg, err := ParseURL("redis://host:6379/0?layout=cluster"); err != nil || cfg.Layout != LayoutCluster || !strings.Contains(string(b), "redis://host:6379/0?layout=cluster") {
		t.Errorf("the one-server cluster layout URL of the page: %+v, %v", cfg, err)
	}
	if n < 2 {
		t.Errorf("found %d cluster URLs in the page; want its 2 examples", n)
	}
}

// TestConformanceClusterLayoutOneServer: the cluster layout on one server
// (redis://…?layout=cluster, the step before copying keys into a cluster)
// passes the conformance suite too.
func TestConformanceClusterLayoutOneServer(t *testing.T) {
	testURL(t)
	storetest.Run(t, conformanceHarness(openPrefix, "fgl_test_", func(c *Config) { c.Layout = LayoutCluster }))
	s := openPrefix(t, "fgl_test_cleanup")
	dropPrefix(t, s.Client(), "fgl_test_*")
}

// TestClusterAckOnKeyMaster: with one shard's replica frozen (SIGSTOP to
// its process, found by INFO server on this machine), acknowledged
// acquires on that shard's keys fail closed, since WAIT runs on the key's
// master and counts its replica. The broken variant sends WAIT wherever a
// keyless command lands (any master, whose replica answers): some of the
// same acquires succeed with a fence the frozen replica lacks.
func TestClusterAckOnKeyMaster(t *testing.T) {
	for _, tc := range []struct {
		name         string
		waitAnywhere bool
	}{{"key_master", false}, {"wait_anywhere_broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openCluster(t, "fgc_ackm", func(c *Config) { c.AckReplicas = 1; c.AckTimeout = 100 * time.Millisecond })
			t.Cleanup(func() { dropCluster(t, s, "fgc_ackm*") })
			s.waitAnywhere = tc.waitAnywhere
			ctx := t.Context()
			ms, err := s.masters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			master := ms[0]
			// The replica of that master, and its pid.
			var replica *goredis.Client
			err = s.cluster.ForEachShard(ctx, func(ctx context.Context, c *goredis.Client) error {
				info, err := c.Info(ctx, "replication").Result()
				if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+strings.Split(master.Options().Addr, ":")[1]+"\r") {
					replica = c
				}
				return nil
			})
			if err != nil || replica == nil {
				t.Fatalf("no replica of %s found: %v", master.Options().Addr, err)
			}
			pid, err := serverPID(ctx, replica)
			if err != nil {
				t.Fatal(err)
			}
			// The broken variant's WAIT lands on a node picked at random,
			// so it gets more tries (it stops at its first grant).
			want := 6
			if tc.waitAnywhere {
				want = 30
			}
			var keys []string
			for i := 0; len(keys) < want; i++ {
				k := fmt.Sprintf("ackm/%d", i)
				lk, _ := s.LockKey(k)
				if m, err := s.cluster.MasterForKey(ctx, lk); err == nil && m.Options().Addr == master.Options().Addr {
					keys = append(keys, k)
				}
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP the replica (pid %d): %v", pid, err)
			}
			thawed := false
			thaw := func() {
				if !thawed {
					thawed = true
					_ = syscall.Kill(pid, syscall.SIGCONT)
				}
			}
			defer thaw()
			granted := 0
			for _, k := range keys {
				if tc.waitAnywhere && granted > 0 {
					break
				}
				actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				r, err := s.Acquire(actx, k, 5*time.Second)
				cancel()
				switch {
				case err == nil && r.OK:
					granted++
				case !tc.waitAnywhere && lockstore.CodeOf(err) != lockstore.ServiceUnavailable:
					t.Errorf("Acquire(%s) with the replica frozen = %+v, %v; want ServiceUnavailable or (broken) a grant", k, r, err)
				}
			}
			thaw()
			t.Logf("acknowledged acquires granted with the shard's replica frozen: %d (of %d tried; the broken variant stops at its first)", granted, len(keys))
			switch {
			case !tc.waitAnywhere && granted != 0:
				t.Errorf("%d acquires were acknowledged with their shard's only replica frozen: WAIT did not run on the key's master", granted)
			case tc.waitAnywhere && granted == 0:
				t.Errorf("the broken variant (WAIT on any master) was never acknowledged elsewhere: the test cannot tell where WAIT runs")
			}
		})
	}
}

// serverPID is the process id INFO server reports.
func serverPID(ctx context.Context, c *goredis.Client) (int, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server has no process_id")
}

// TestClusterMigrationRetry: a slot of the shared cluster moves to another
// master, one key at a time (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE),
// while 8 callers acquire and release keys in it. With the store's retry
// no call fails (MOVED and ASK are followed, TRYAGAIN and the half-moved
// lock's undeclared read are sent again); without it (the broken variant)
// the half-moved slot's errors reach the callers.
func TestClusterMigrationRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noRetry bool
	}{{"retry", false}, {"no_retry_broken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openCluster(t, "fgc_mig_"+tc.name)
			t.Cleanup(func() { dropCluster(t, s, "fgc_mig_*") })
			s.noRetry = tc.noRetry
			ctx := t.Context()
			slot, _ := ClusterKeySlot("mig/" + tc.name)
			var keys []string
			for i := 0; len(keys) < 8; i++ {
				k := fmt.Sprintf("mig/%s/%d", tc.name, i)
				if sl, _ := ClusterKeySlot(k); sl == slot {
					keys = append(keys, k)
				}
			}
			owner := func() (*goredis.Client, []*goredis.Client) {
				ms, err := s.masters(ctx)
				if err != nil {
					t.Fatal(err)
				}
				lk, _ := s.LockKey(keys[0])
				m, err := s.cluster.MasterForKey(ctx, lk)
				if err != nil {
					t.Fatal(err)
				}
				var others []*goredis.Client
				for _, c := range ms {
					if c.Options().Addr != m.Options().Addr {
						others = append(others, c)
					}
				}
				return m, others
			}
			src, others := owner()
			dst := others[0]
			// Some state in the slot before it moves: fence counters.
			for _, k := range keys {
				r, err := s.Acquire(ctx, k, 5*time.Second)
				if err != nil || !r.OK {
					t.Fatalf("Acquire(%s) = %+v, %v", k, r, err)
				}
				_, _ = s.Release(ctx, r.LockID)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			ok := 0
			for w := range keys {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						r, err := s.Acquire(cctx, keys[w], 5*time.Second)
						if err == nil && r.OK {
							_, err = s.Release(cctx, r.LockID)
						}
						cancel()
						mu.Lock()
						if err != nil {
							failed = append(failed, err.Error())
						} else {
							ok++
						}
						mu.Unlock()
					}
				})
			}
			id := func(c *goredis.Client) string { return c.Do(ctx, "cluster", "myid").Val().(string) }
			srcID, dstID := id(src), id(dst)
			host, port, _ := strings.Cut(dst.Options().Addr, ":")
			do := func(c *goredis.Client, args ...any) {
				if err := c.Do(ctx, args...).Err(); err != nil {
					t.Errorf("%v: %v", args, err)
				}
			}
			time.Sleep(100 * time.Millisecond)
			do(dst, "cluster", "setslot", slot, "importing", srcID)
			do(src, "cluster", "setslot", slot, "migrating", dstID)
			moved := 0
			for {
				ks, err := src.Do(ctx, "cluster", "getkeysinslot", slot, 1).Slice()
				if err != nil || len(ks) == 0 {
					break
				}
				if err := src.Do(ctx, "migrate", host, port, ks[0], 0, 5000).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
					t.Errorf("MIGRATE: %v", err)
					break
				}
				moved++
				time.Sleep(15 * time.Millisecond)
			}
			for _, c := range append([]*goredis.Client{dst, src}, others[1:]...) {
				do(c, "cluster", "setslot", slot, "node", dstID)
			}
			time.Sleep(200 * time.Millisecond)
			close(stop)
			wg.Wait()
			t.Logf("slot %d: %d keys moved; %d cycles ok, %d failed %v", slot, moved, ok, len(failed), failed[:min(3, len(failed))])
			if moved < 8 {
				t.Errorf("only %d keys moved; the slot holds at least 8 fence counters", moved)
			}
			switch {
			case !tc.noRetry && len(failed) != 0:
				t.Errorf("%d calls failed while the slot moved; want none", len(failed))
			case tc.noRetry && len(failed) == 0:
				t.Errorf("without the retry no call failed: the test cannot tell a half-moved slot's errors")
			}
		})
	}
}
