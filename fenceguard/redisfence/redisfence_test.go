package redisfence_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fenceguard/redisfence"
)

// client connects to REDIS_URL; a missing Redis fails the test (make test
// and scripts/testenv start one), it never skips.
func client(t *testing.T) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Fatal("REDIS_URL is not set: run the tests with `make test` or scripts/testenv, which start a throwaway Redis")
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func prefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "redisfence_" + hex.EncodeToString(b) + ":"
}

func fence(n int64) string { return fmt.Sprintf("%015d", n) }

func TestSemantics(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	key := prefix() + "orders/42"
	for _, c := range []struct {
		fence, stored string
		applied       bool
	}{
		{fence(7), fence(7), true},
		{fence(7), fence(7), true}, // one holder, several writes
		{fence(6), fence(7), false},
		{fence(1000), fence(1000), true}, // fences jump
		{fence(999), fence(1000), false},
	} {
		res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: c.fence, Value: "v" + c.fence})
		if err != nil {
			t.Fatal(err)
		}
		if res.Applied != c.applied || res.Stored != c.stored || res.Fence != c.fence {
			t.Errorf("set under %s: %+v; want applied %v, stored %s", c.fence, res, c.applied, c.stored)
		}
	}
	if v, _ := rdb.Get(ctx, key).Result(); v != "v"+fence(1000) {
		t.Errorf("value %q, want the fence-1000 write's", v)
	}
	// A TTL expires the value, never the fence: a slow holder's write
	// after the value expired is still refused.
	res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: fence(1001), Value: "x", TTL: 50 * time.Millisecond})
	if err != nil || !res.Applied {
		t.Fatalf("%+v %v", res, err)
	}
	time.Sleep(120 * time.Millisecond)
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Errorf("the value did not expire")
	}
	if res, _ := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: fence(1000), Value: "late"}); res.Applied {
		t.Errorf("a lower fence was applied after the value expired")
	}
	for _, bad := range []string{"", "7", fence(0), "0000000000000a7"} {
		if _, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: bad, Value: "x"}); err == nil {
			t.Errorf("fence %q accepted", bad)
		}
	}
	if err := rdb.Set(ctx, redisfence.FenceKey(key), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: fence(2000), Value: "x"}); err == nil || !strings.Contains(err.Error(), "no fence") {
		t.Errorf("a fence key holding garbage: %v", err)
	}
}

// committer commits fc to key, hold after the edge's check. It runs the
// Redis call that commits through commit, which records the outcome
// atomically with it (see run).
type committer func(ctx context.Context, rdb *redis.Client, key, fc string, hold time.Duration, commit func(op func() (bool, error)) (bool, error)) (bool, error)

var committers = map[string]committer{
	"Set": func(ctx context.Context, rdb *redis.Client, key, fc string, hold time.Duration, commit func(func() (bool, error)) (bool, error)) (bool, error) {
		time.Sleep(hold)
		return commit(func() (bool, error) {
			res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: fc, Value: fc})
			return res.Applied, err
		})
	},
}

var brokenCommitters = map[string]committer{
	"plain SET": func(ctx context.Context, rdb *redis.Client, key, fc string, hold time.Duration, commit func(func() (bool, error)) (bool, error)) (bool, error) {
		time.Sleep(hold)
		return commit(func() (bool, error) { return true, rdb.Set(ctx, key, fc, 0).Err() })
	},
	"GET the fence, then SET": func(ctx context.Context, rdb *redis.Client, key, fc string, hold time.Duration, commit func(func() (bool, error)) (bool, error)) (bool, error) {
		s, err := rdb.Get(ctx, redisfence.FenceKey(key)).Result()
		if err != nil && err != redis.Nil {
			return false, err
		}
		if s > fc {
			return false, nil
		}
		time.Sleep(hold)
		return commit(func() (bool, error) { return true, rdb.MSet(ctx, redisfence.FenceKey(key), fc, key, fc).Err() })
	},
}

// run: per key, the current fence jumps up by 1–3 every 15–40 ms; 24
// writers take a key's current fence, wait 0–30 ms (check to commit), and
// commit. Commits are recorded in the order Redis ran them: the Redis call
// that commits and the record are made under one mutex per key, so for
// writes of one key the record's order is Redis's.
func run(t *testing.T, rdb *redis.Client, c committer, d time.Duration) (commits, inversions, refused int) {
	t.Helper()
	const keys = 3
	p := prefix()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var cur [keys]atomic.Int64
	var mu [keys]sync.Mutex
	var hist [keys][]string
	var nref atomic.Int64
	for k := range cur {
		cur[k].Store(1)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(time.Duration(15+mrand.IntN(25)) * time.Millisecond)
			cur[mrand.IntN(keys)].Add(int64(1 + mrand.IntN(3)))
		}
	}()
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				k := mrand.IntN(keys)
				fc := fence(cur[k].Load())
				hold := time.Duration(mrand.IntN(31)) * time.Millisecond
				ok, err := c(context.Background(), rdb, fmt.Sprintf("%sk%d", p, k), fc, hold, func(op func() (bool, error)) (bool, error) {
					mu[k].Lock()
					defer mu[k].Unlock()
					ok, err := op()
					if ok && err == nil {
						hist[k] = append(hist[k], fc)
					}
					return ok, err
				})
				if err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				if !ok {
					nref.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, h := range hist {
		top := ""
		for _, f := range h {
			commits++
			if f < top {
				inversions++
			}
			top = max(top, f)
		}
	}
	return commits, inversions, int(nref.Load())
}

// TestCommitsFollowFenceOrder: with Set, no key ever commits under a fence
// lower than one it committed before; without it, the same workload does.
func TestCommitsFollowFenceOrder(t *testing.T) {
	rdb := client(t)
	for name, c := range committers {
		commits, inv, refused := run(t, rdb, c, 3*time.Second)
		t.Logf("%s: %d commits, %d out of fence order, %d refused stale", name, commits, inv, refused)
		if inv != 0 || refused == 0 || commits < 100 {
			t.Errorf("%s: %d commits, %d out of fence order, %d refused; want 0 out of order, and both commits and refusals", name, commits, inv, refused)
		}
	}
	for name, c := range brokenCommitters {
		commits, inv, _ := run(t, rdb, c, 3*time.Second)
		t.Logf("without the helper (%s): %d commits, %d out of fence order", name, commits, inv)
		if inv == 0 {
			t.Errorf("%s: no commit out of fence order in %d: the workload cannot tell the helper from its absence", name, commits)
		}
	}
}
