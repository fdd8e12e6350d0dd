package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
	redisstore "github.com/fencegate/fencegate/lockstore/redis"
)

// The Lua floor of BenchmarkGateway's Redis rows (issue #21 item 7): a
// hand-written acquire and release in Lua with SyncGuard's key layout — the
// lock value at <prefix>:<key>, the lockId index at <prefix>:id:<lockId>,
// the fence counter at <prefix>:fence:<prefix>:<key> — run through go-redis
// from the bench process, one EVALSHA per call (as SyncGuard's own client
// sends them). No gateway, no validation beyond what the scripts need, no
// pipelining, no clock floor: what a lock cycle costs a client that talks
// to Redis directly. gateway/redis/http ÷ this is the report's "÷ Lua
// floor" column.

// luaFloorAcquire: TIME, GET lock, INCR counter, SET value PX, SET index PX.
// KEYS: lockKey, indexKey, fenceKey; ARGV: lockId, ttlMs, key, ttlMs+1000.
var luaFloorAcquire = goredis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local raw = redis.call('GET', KEYS[1])
if raw then
  local d = cjson.decode(raw)
  if d.expiresAtMs > now - 1000 then return 0 end
end
local fence = redis.call('INCR', KEYS[3])
local exp = now + tonumber(ARGV[2])
redis.call('SET', KEYS[1], cjson.encode({lockId = ARGV[1], expiresAtMs = exp, acquiredAtMs = now,
  key = ARGV[3], fence = string.format('%015d', fence)}), 'PX', ARGV[4])
redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4])
return string.format('%015d:%d', fence, exp)
`)

// luaFloorRelease: GET index, GET lock, check its lockId, DEL both.
// KEYS: indexKey; ARGV: lockId.
var luaFloorRelease = goredis.NewScript(`
local lockKey = redis.call('GET', KEYS[1])
if not lockKey then return 0 end
local raw = redis.call('GET', lockKey)
if not raw then return 0 end
if cjson.decode(raw).lockId ~= ARGV[1] then return 0 end
redis.call('DEL', lockKey, KEYS[1])
return 1
`)

// luaFloor is a cycler over the two scripts, on the Redis store's own
// go-redis client (same pool options) and under its prefix, so the store's
// cleanup deletes its keys.
type luaFloor struct {
	rdb    *goredis.Client
	prefix string
}

func newLuaFloor(s *redisstore.Store) luaFloor {
	return luaFloor{rdb: s.Client(), prefix: s.Prefix()}
}

func (f luaFloor) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Acquired, error) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	lockKey := f.prefix + ":" + key
	ms := ttl.Milliseconds()
	v, err := luaFloorAcquire.Run(ctx, f.rdb,
		[]string{lockKey, f.prefix + ":id:" + id, f.prefix + ":fence:" + lockKey},
		id, ms, key, ms+1000).Result()
	if err != nil {
		return lock.Acquired{AcquireResult: lockstore.AcquireResult{}}, err
	}
	s, ok := v.(string)
	if !ok {
		return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: false, Reason: lockstore.ReasonLocked}}, nil
	}
	fence, exp, _ := strings.Cut(s, ":")
	expMs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return lock.Acquired{AcquireResult: lockstore.AcquireResult{}}, fmt.Errorf("lua floor: reply %q", s)
	}
	return lock.Acquired{AcquireResult: lockstore.AcquireResult{OK: true, LockID: id, Fence: fence, ExpiresAtMs: expMs}}, nil
}

func (f luaFloor) Release(ctx context.Context, lockID string) (lockstore.ReleaseResult, error) {
	n, err := luaFloorRelease.Run(ctx, f.rdb, []string{f.prefix + ":id:" + lockID}, lockID).Int()
	if err != nil {
		return lockstore.ReleaseResult{}, err
	}
	return lockstore.ReleaseResult{OK: n == 1}, nil
}

// TestLuaFloorLayout: the floor writes SyncGuard's layout — the same three
// keys the Redis store writes for a key — so it prices the same Redis work.
func TestLuaFloorLayout(t *testing.T) {
	s := openRedis(t)
	f := newLuaFloor(s)
	ctx := t.Context()
	a, err := f.Acquire(ctx, "bench/layout", lockTTL)
	if err != nil || !a.OK {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	lockKey, _ := s.LockKey("bench/layout")
	fenceKey, _ := s.FenceKey("bench/layout")
	indexKey, _ := s.IndexKey(a.LockID)
	for _, k := range []string{lockKey, fenceKey, indexKey} {
		if n, err := s.Client().Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("key %q: exists %d, %v; want the store's layout", k, n, err)
		}
	}
	// The store reads the floor's lock: same value format.
	info, err := s.LookupKey(ctx, "bench/layout")
	if err != nil || info == nil || info.Fence != a.Fence {
		t.Fatalf("store lookup of the floor's lock: %+v, %v; want fence %s", info, err, a.Fence)
	}
	r, err := f.Release(ctx, a.LockID)
	if err != nil || !r.OK {
		t.Fatalf("release: %+v, %v", r, err)
	}
	if r, _ := f.Release(ctx, a.LockID); r.OK {
		t.Fatal("second release succeeded")
	}
}
