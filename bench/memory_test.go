package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	bbolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
	redisstore "github.com/fencegate/fencegate/lockstore/redis"
)

// heldLocks is how many locks the memory benchmark holds at once.
var heldLocks = flag.Int("held-locks", 100_000, "locks held at once by BenchmarkHeldLockMemory")

// memResult is what holding heldLocks locks cost a store.
type memResult struct {
	Locks int
	// StoreBytes is the store's own growth per lock: bolt's file size,
	// Redis's used_memory (lock value, lockId index and fence counter).
	StoreBytes float64
	// RSSBytes is this process's resident set growth per lock (bolt only:
	// the store is embedded, so this is the gateway's own memory, the
	// file's mapped pages included).
	RSSBytes float64
	Elapsed  time.Duration
	// Setup says what was measured (Redis: the key prefix and database).
	Setup string
	// Parts is where StoreBytes goes, per lock; the parts add up to it.
	Parts []memPart
}

// memPart is one share of a held lock's bytes.
type memPart struct {
	Name  string
	Bytes float64
	Note  string
}

var memBoard = struct {
	sync.Mutex
	m map[string]memResult
}{m: map[string]memResult{}}

// BenchmarkHeldLockMemory: memory per held lock, measured by acquiring
// -held-locks locks (100,000 by default) with TTLs that outlive the run and
// comparing the store's size before and after — bolt's file bytes and the
// gateway's RSS, Redis's used_memory. The measurement runs once per store;
// the framework's later, larger b.N calls only repeat the figures.
func BenchmarkHeldLockMemory(b *testing.B) {
	for _, st := range []struct {
		name    string
		measure func(b testing.TB, n int) memResult
	}{
		{"bolt", measureBoltMemory},
		{"redis", measureRedisMemory},
	} {
		b.Run(st.name, func(b *testing.B) {
			id := "memory/" + st.name
			memBoard.Lock()
			r, done := memBoard.m[id]
			memBoard.Unlock()
			if !done {
				r = st.measure(b, *heldLocks)
				memBoard.Lock()
				memBoard.m[id] = r
				memBoard.Unlock()
			}
			b.ReportMetric(r.StoreBytes, "store-B/lock")
			if r.RSSBytes != 0 {
				b.ReportMetric(r.RSSBytes, "rss-B/lock")
			}
		})
	}
}

// holdLocks acquires n distinct keys from the worker pool, TTL heldTTL,
// and leaves them held.
func holdLocks(ctx context.Context, s lockstore.Store, name string, n int) (time.Duration, error) {
	var i int64
	var mu sync.Mutex
	next := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		i++
		return i, i <= int64(n)
	}
	smp, err := measureN(ctx, *workers, n, func(ctx context.Context, _ int) error {
		k, ok := next()
		if !ok {
			return nil
		}
		a, err := s.Acquire(ctx, fmt.Sprintf("bench/mem/%s/%d", name, k), heldTTL)
		if err != nil {
			return err
		}
		if !a.OK {
			return fmt.Errorf("acquire: not acquired (%s) on a fresh key", a.Reason)
		}
		return nil
	})
	return smp.elapsed, err
}

func measureBoltMemory(b testing.TB, n int) memResult {
	path := filepath.Join(b.TempDir(), "memory.db")
	s, err := bolt.Open(b.Context(), bolt.Config{Path: path, Logger: logger})
	if err != nil {
		b.Fatalf("open bolt store: %v", err)
	}
	defer s.Close()
	fileBefore, rssBefore := fileSize(b, path), rss()
	el, err := holdLocks(b.Context(), s, "bolt", n)
	if err != nil {
		b.Fatalf("hold %d locks: %v", n, err)
	}
	runtime.GC()
	r := memResult{
		Locks:      n,
		StoreBytes: float64(fileSize(b, path)-fileBefore) / float64(n),
		RSSBytes:   float64(rss()-rssBefore) / float64(n),
		Elapsed:    el,
		Setup:      "keys bench/mem/bolt/1…N",
	}
	if err := s.Close(); err != nil {
		b.Fatalf("close bolt store: %v", err)
	}
	r.Parts = boltParts(b, path, fileBefore, n)
	return r
}

// boltParts splits the bolt file's growth by where bbolt put it: the
// pages of each lock bucket (with their fill), the rest of the pages up to
// the high-water mark (free pages, freelist, meta, the other buckets) and
// the file's tail past the high-water mark, which bbolt preallocates in
// steps (16 MiB once the file passes 16 MiB).
func boltParts(tb testing.TB, path string, fileBefore int64, n int) []memPart {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatalf("reopen bolt file: %v", err)
	}
	defer db.Close()
	var parts []memPart
	err = db.View(func(tx *bbolt.Tx) error {
		var inBuckets int
		for _, name := range []string{"locks", "lock_ids", "fence_counters"} {
			bk := tx.Bucket([]byte(name))
			if bk == nil {
				return fmt.Errorf("no bucket %s", name)
			}
			st := bk.Stats()
			alloc := st.BranchAlloc + st.LeafAlloc
			inBuckets += alloc
			var kv int
			if err := bk.ForEach(func(k, v []byte) error { kv += len(k) + len(v); return nil }); err != nil {
				return err
			}
			parts = append(parts, memPart{
				Name:  "bucket " + name,
				Bytes: float64(alloc) / float64(n),
				Note: fmt.Sprintf("key+value %.0f B + 16 B element header; leaf pages %.0f%% full; %d leaf + %d branch pages",
					float64(kv)/float64(max(st.KeyN, 1)), 100*float64(st.LeafInuse)/float64(max(st.LeafAlloc, 1)), st.LeafPageN+st.LeafOverflowN, st.BranchPageN+st.BranchOverflowN),
			})
		}
		hwm := tx.Size()
		parts = append(parts,
			memPart{Name: "other pages below the high-water mark", Bytes: float64(hwm-int64(inBuckets)-fileBefore) / float64(n),
				Note: "free and pending pages, freelist, meta, the other (empty) buckets"},
			memPart{Name: "file tail past the high-water mark", Bytes: float64(fileSize(tb, path)-hwm) / float64(n),
				Note: "bbolt grows the file ahead of use, in 16 MiB steps past 16 MiB"})
		return nil
	})
	if err != nil {
		tb.Fatalf("bolt file stats: %v", err)
	}
	return parts
}

func measureRedisMemory(b testing.TB, n int) memResult {
	s, setup := openRedisMemory(b)
	used := func() int64 {
		info, err := s.Client().Info(b.Context(), "memory").Result()
		if err != nil {
			b.Fatalf("INFO memory: %v", err)
		}
		v, err := infoField(info, "used_memory")
		if err != nil {
			b.Fatal(err)
		}
		return int64(v)
	}
	before := used()
	el, err := holdLocks(b.Context(), s, "redis", n)
	if err != nil {
		b.Fatalf("hold %d locks: %v", n, err)
	}
	r := memResult{Locks: n, StoreBytes: float64(used()-before) / float64(n), Elapsed: el, Setup: setup}
	r.Parts = redisParts(b, s, fmt.Sprintf("bench/mem/redis/%d", (n+1)/2), r.StoreBytes)
	return r
}

// memoryDBClaim marks a Redis database as taken by one benchmark process.
const memoryDBClaim = "fencegate-bench:memory-claim"

// openRedisMemory opens the Redis store for the memory benchmark. Bytes per
// lock depend on key length, and a deployment's keys start with the
// default prefix "syncguard", not the ~28-byte run prefix of the other
// benchmarks, which every lock repeats four times (lock key, index value,
// twice in the counter's name). So the store runs with the default prefix,
// isolated instead by a database index of its own: the first of databases
// 1–15 (never the URL's own) that is empty and whose claim key this
// process sets first (SET NX, expiring after 15 min, so two runs never
// share one). Cleanup deletes the prefix's keys and the claim there. A
// server without such a database (databases 1, or none empty) gets the run
// prefix on the URL's database, as the other benchmarks, and the report
// says so.
func openRedisMemory(tb testing.TB) (*redisstore.Store, string) {
	tb.Helper()
	cfg, err := redisstore.ParseURL(redisURL(tb))
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	if cfg.Options == nil {
		return openRedis(tb), "run prefix (Sentinel URL: no database claimed)"
	}
	ctx := tb.Context()
	for db := 1; db < 16; db++ {
		if db == cfg.Options.DB {
			continue
		}
		o := *cfg.Options
		o.DB = db
		c := goredis.NewClient(&o)
		n, err := c.DBSize(ctx).Result()
		if err != nil { // past the server's last database, or no SELECT
			_ = c.Close()
			break
		}
		if n != 0 {
			_ = c.Close()
			continue
		}
		claimed, err := c.SetNX(ctx, memoryDBClaim, runID, 15*time.Minute).Result()
		_ = c.Close()
		if err != nil || !claimed {
			continue
		}
		cfg.Options = &o
		cfg.Prefix = redisstore.DefaultPrefix
		s := openRedisConfig(tb, cfg)
		// Registered after the store's own cleanup, so it runs first,
		// while the store is open.
		tb.Cleanup(func() {
			ctx, cancel := cleanupCtx()
			defer cancel()
			if err := s.Client().Del(ctx, memoryDBClaim).Err(); err != nil {
				tb.Errorf("delete claim: %v", err)
			}
		})
		return s, fmt.Sprintf("prefix %q (the default), database %d claimed empty", s.Prefix(), db)
	}
	s := openRedis(tb)
	return s, fmt.Sprintf("prefix %q (no empty database to claim)", s.Prefix())
}

// redisParts splits Redis's bytes per lock by key: MEMORY USAGE of one
// sample lock's value, lockId index and fence counter (each key's name,
// value object and main-dict entry), and what used_memory grew by beyond
// them: the expires dict's entries for the two keys with a TTL and both
// dicts' bucket arrays, sized to the next power of two.
func redisParts(tb testing.TB, s *redisstore.Store, key string, total float64) []memPart {
	ctx, c := tb.Context(), s.Client()
	lockKey, err := s.LockKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	fenceKey, err := s.FenceKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	val, err := c.Get(ctx, lockKey).Result()
	if err != nil {
		tb.Fatalf("GET sample lock: %v", err)
	}
	var lv struct {
		LockID string `json:"lockId"`
	}
	if err := json.Unmarshal([]byte(val), &lv); err != nil {
		tb.Fatalf("sample lock value: %v", err)
	}
	idKey, err := s.IndexKey(lv.LockID)
	if err != nil {
		tb.Fatal(err)
	}
	var parts []memPart
	sum := 0.0
	for _, k := range []struct{ name, key, note string }{
		{"lock value key", lockKey, "JSON lock value, PX"},
		{"lockId index key", idKey, "value: the lock key's name, PX"},
		{"fence counter key", fenceKey, "integer, no expiry"},
	} {
		b, err := c.MemoryUsage(ctx, k.key, 0).Result()
		if err != nil {
			tb.Fatalf("MEMORY USAGE %s: %v", k.name, err)
		}
		vlen, err := c.StrLen(ctx, k.key).Result()
		if err != nil {
			tb.Fatalf("STRLEN %s: %v", k.name, err)
		}
		sum += float64(b)
		parts = append(parts, memPart{Name: k.name, Bytes: float64(b),
			Note: fmt.Sprintf("name %d B, value %d B; %s", len(k.key), vlen, k.note)})
	}
	parts = append(parts, memPart{Name: "expires entries, dict buckets, allocator", Bytes: total - sum,
		Note: "used_memory growth beyond the three keys' MEMORY USAGE"})
	return parts
}

func fileSize(tb testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// rss is this process's resident set size in bytes (0 if unknown).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
