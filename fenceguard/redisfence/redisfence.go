// Package redisfence makes a Redis write and its fence comparison one
// atomic step: a Lua script sets a value only when the write's fence is not
// lower than the fence stored for it, and moves the stored fence up with
// the value. It is the Redis commit half of fenceguard; it uses go-redis/v9.
//
// The stored fence lives in its own key (Write.FenceKey, by default the
// value's key + ":fence"), a 15-digit string that never expires: if it
// expired with the value, a slow holder's write could land after a newer
// one once the value had expired. In Redis Cluster both keys must share a
// slot: give the value's key a hash tag ("{orders/42}").
package redisfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/lockstore"
)

// setScript: KEYS[1] the value, KEYS[2] its fence; ARGV[1] the fence (15
// digits), ARGV[2] the value, ARGV[3] the TTL in ms ("0": none). Returns
// {1, fence} when applied, {0, stored} when a higher fence is stored. A
// script runs alone: the comparison and both SETs are one step. Fences are
// below 2^53, so tonumber compares them exactly.
var setScript = redis.NewScript(`
local stored = redis.call('GET', KEYS[2])
if stored then
  local s = tonumber(stored)
  if not s then return redis.error_reply('redisfence: the fence key holds no fence') end
  if s > tonumber(ARGV[1]) then return {0, stored} end
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return {1, ARGV[1]}
`)

// Write is one fenced SET.
type Write struct {
	Key      string        // the value's key
	FenceKey string        // the key of its stored fence; "" is Key + ":fence"
	Fence    string        // the write's fence (fenceguard.Fence.Fence): 15 digits, at least 1
	Value    string        // the value
	TTL      time.Duration // the value's expiry (0: none); the fence key never expires
}

// Set stores w.Value at w.Key unless a fence higher than w.Fence is stored
// for it; a write under the stored fence is applied (a holder writes many
// times under one fence). One script, one round trip.
func Set(ctx context.Context, rdb redis.Scripter, w Write) (fenceguard.Result, error) {
	n, err := lockstore.ParseFence(w.Fence)
	if err != nil || n < 1 {
		return fenceguard.Result{}, fmt.Errorf("redisfence: fence %q: want 15 digits, at least 1", w.Fence)
	}
	if w.Key == "" {
		return fenceguard.Result{}, errors.New("redisfence: empty key")
	}
	if w.TTL < 0 || w.TTL > 0 && w.TTL < time.Millisecond {
		return fenceguard.Result{}, fmt.Errorf("redisfence: TTL %v: want 0 or at least 1ms", w.TTL)
	}
	fk := w.FenceKey
	if fk == "" {
		fk = w.Key + ":fence"
	}
	v, err := setScript.Run(ctx, rdb, []string{w.Key, fk}, w.Fence, w.Value, strconv.FormatInt(w.TTL.Milliseconds(), 10)).Slice()
	if err != nil {
		return fenceguard.Result{}, fmt.Errorf("redisfence: set: %w", err)
	}
	if len(v) != 2 {
		return fenceguard.Result{}, fmt.Errorf("redisfence: set: unexpected reply %v", v)
	}
	applied, _ := v[0].(int64)
	stored, _ := v[1].(string)
	return fenceguard.Result{Applied: applied == 1, Fence: w.Fence, Stored: stored}, nil
}
