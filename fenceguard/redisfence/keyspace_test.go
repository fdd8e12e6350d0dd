package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fenceguard/redisfence"
)

// setter is one fenced SET: the helper, or a broken variant of it. fenceOf
// names where it keeps a value key's fence.
type setter struct {
	set     func(ctx context.Context, rdb *redis.Client, key, fence, value string) (applied bool, err error)
	fenceOf func(key string) string
}

var helperSetter = setter{
	set: func(ctx context.Context, rdb *redis.Client, key, fc, value string) (bool, error) {
		res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: key, Fence: fc, Value: value})
		return res.Applied, err
	},
	fenceOf: redisfence.FenceKey,
}

// legacySetter is the helper as it was: the same script, the fence at
// key + ":fence", a key another value write can name (#26 item 7).
var legacySetter = setter{
	set: func(ctx context.Context, rdb *redis.Client, key, fc, value string) (bool, error) {
		v, err := redis.NewScript(redisfence.SetLua).Run(ctx, rdb, []string{key, key + ":fence"}, fc, value, "0").Slice()
		if err != nil {
			return false, err
		}
		return v[0].(int64) == 1, nil
	},
	fenceOf: func(key string) string { return key + ":fence" },
}

// keyspaceViolation runs random fenced writes over value keys chosen to
// reach each other's fences (k + ":fence", the fence prefix + k, each
// nested) with values that look like fences or like nothing, and returns
// the first time a write changed or broke another key's stored fence, or a
// key's stored fence went down ("" when none did). Writes the setter
// refuses as input are skipped: they write nothing.
func keyspaceViolation(t *testing.T, rdb *redis.Client, s setter, seed uint64) string {
	t.Helper()
	ctx := context.Background()
	p := prefix()
	base := []string{p + "orders/42", p + "{orders/43}"}
	var keys []string
	for _, b := range base {
		keys = append(keys, b, b+":fence", b+":fence:fence", redisfence.FencePrefix+b, b+":"+redisfence.FencePrefix)
	}
	values := []string{"1", fence(1), "garbage", "", fence(999999999999999), "000000000000000"}
	rng := mrand.New(mrand.NewPCG(seed, 7))
	stored := map[string]string{} // the model: each key's highest applied fence
	for i := range 400 {
		k := keys[rng.IntN(len(keys))]
		fc := fence(int64(1 + rng.IntN(50)))
		v := values[rng.IntN(len(values))]
		applied, err := s.set(ctx, rdb, k, fc, v)
		if err != nil {
			if strings.Contains(err.Error(), "may not start with") {
				continue // refused as input: nothing written
			}
			return fmt.Sprintf("write %d: SET %q under %s: %v", i, k, fc, err)
		}
		if want := fc >= stored[k]; applied != want {
			return fmt.Sprintf("write %d: SET %q under %s with %s stored: applied %v", i, k, fc, stored[k], applied)
		}
		if applied {
			stored[k] = fc
		}
		for _, o := range keys {
			got, err := rdb.Get(ctx, s.fenceOf(o)).Result()
			if errors.Is(err, redis.Nil) {
				got, err = "", nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != stored[o] {
				return fmt.Sprintf("write %d: SET %q=%q under %s left %q's stored fence %q; want %q", i, k, v, fc, o, got, stored[o])
			}
		}
	}
	return ""
}

// TestFenceKeyspace: no write to any value key changes or breaks another
// key's stored fence, and a stored fence only rises; the helper as it was
// (the fence at key + ":fence") is caught by the same check.
func TestFenceKeyspace(t *testing.T) {
	rdb := client(t)
	for seed := range uint64(3) {
		if v := keyspaceViolation(t, rdb, helperSetter, seed); v != "" {
			t.Errorf("seed %d: %s", seed, v)
		}
	}
	caught := 0
	for seed := range uint64(3) {
		if v := keyspaceViolation(t, rdb, legacySetter, seed); v != "" {
			caught++
			t.Logf("the old fence key, seed %d: %s", seed, v)
		}
	}
	if caught != 3 {
		t.Errorf("the old fence key (key + \":fence\") passed %d of 3 runs: the check cannot tell the fix from the bug", 3-caught)
	}
}

// TestIssue26Item7 is the report's own sequence: writing the resource
// "orders/42:fence" (value 1, or a non-number) neither lowers orders/42's
// fence so that a stale write is applied, nor breaks every later write.
func TestIssue26Item7(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	for _, value := range []string{"1", "garbage"} {
		k := prefix() + "orders/42"
		for _, w := range []struct {
			key, fence, value string
			applied           bool
		}{
			{k, fence(7), "new", true},
			{k + ":fence", fence(1), value, true},
			{k, fence(5), "stale", false},
			{k, fence(7), "again", true},
		} {
			res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: w.key, Fence: w.fence, Value: w.value})
			if err != nil || res.Applied != w.applied {
				t.Errorf("value %q: SET %q under %s: %+v, %v; want applied %v", value, w.key, w.fence, res, err, w.applied)
			}
		}
		if v, _ := rdb.Get(ctx, k).Result(); v != "again" {
			t.Errorf("value %q: orders/42 holds %q", value, v)
		}
	}
}

func TestKeyInput(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	k := prefix() + "a"
	for _, w := range []redisfence.Write{
		{Key: redisfence.FencePrefix + k},
		{Key: redisfence.FencePrefix},
		{Key: ""},
		{Key: k, FenceKey: k + ":fence"},
		{Key: k, FenceKey: redisfence.FencePrefix},
	} {
		w.Fence, w.Value = fence(3), "x"
		if res, err := redisfence.Set(ctx, rdb, w); err == nil {
			t.Errorf("%+v accepted: %+v", w, res)
		}
	}
	if n, _ := rdb.Exists(ctx, k, k+":fence", redisfence.FencePrefix+k, redisfence.FencePrefix+redisfence.FencePrefix+k).Result(); n != 0 {
		t.Errorf("a refused write wrote %d keys", n)
	}
	// A custom fence key inside the prefix is allowed (one fence shared
	// by several values, deliberately).
	res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: k, FenceKey: redisfence.FencePrefix + k + "#shared", Fence: fence(3), Value: "x"})
	if err != nil || !res.Applied {
		t.Errorf("custom fence key: %+v %v", res, err)
	}
}

// TestMigrateLegacy: the fence an earlier version stored at key + ":fence"
// moves to the new key, the higher one kept; afterwards a write under a
// lower fence than the old one is refused.
func TestMigrateLegacy(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	for _, c := range []struct {
		old, cur, want string
	}{
		{fence(9), "", fence(9)},
		{fence(9), fence(12), fence(12)},
		{fence(12), fence(9), fence(12)},
		{"", fence(4), fence(4)},
		{"", "", ""},
		{"garbage", fence(4), fence(4)},
		{"1234567890123456", "", ""}, // not a fence: ignored
	} {
		k := prefix() + "m"
		if c.old != "" {
			rdb.Set(ctx, k+":fence", c.old, 0)
		}
		if c.cur != "" {
			rdb.Set(ctx, redisfence.FenceKey(k), c.cur, 0)
		}
		got, err := redisfence.MigrateLegacy(ctx, rdb, k)
		if err != nil || got != c.want {
			t.Errorf("old %q cur %q: %q, %v; want %q", c.old, c.cur, got, err, c.want)
		}
		if c.want == "" {
			continue
		}
		stale := fmt.Sprintf("%015d", 3)
		if res, err := redisfence.Set(ctx, rdb, redisfence.Write{Key: k, Fence: stale, Value: "late"}); err != nil || res.Applied {
			t.Errorf("after the migration a write under %s: %+v %v", stale, res, err)
		}
	}
	if _, err := redisfence.MigrateLegacy(ctx, rdb, redisfence.FencePrefix+"x"); err == nil {
		t.Error("MigrateLegacy accepted a key in the fence keyspace")
	}
}
