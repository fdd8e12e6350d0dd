// Package redisfence makes a Redis write and its fence comparison one
// atomic step: a Lua script sets a value only when the write's fence is not
// lower than the fence stored for it, and moves the stored fence up with
// the value. It is the Redis commit half of fenceguard; it uses go-redis/v9.
//
// The stored fence lives in its own key, FencePrefix + the value's key, a
// 15-digit string that never expires: if it expired with the value, a slow
// holder's write could land after a newer one once the value had expired.
// FencePrefix is a keyspace no value key may name (Set refuses value keys
// in it), so no write to any value key can lower or break another key's
// stored fence; nor can fencegate's lock store name it, whatever its prefix
// (a lock store prefix may not end in "fence" or contain "fence:"). In Redis
// Cluster both keys must share a slot: give the value's key a hash tag
// ("{orders/42}"); FencePrefix holds no brace, so the tag is kept.
//
// The script is set.lua, which @fencegate/guard (js/) runs as it is.
package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fenceguard"
	"github.com/fencegate/fencegate/lockstore"
)

// FencePrefix is the keyspace of the stored fences: the fence of the value
// key K is FencePrefix + K. Set refuses a value key that starts with it.
// Versions before it stored the fence at K + ":fence", a key another value
// write could name (MigrateLegacy moves such fences).
const FencePrefix = "fencegate.fence:"

// SetLua is the fenced SET (set.lua): KEYS[1] the value, KEYS[2] its
// fence; ARGV[1] the fence (15 digits), ARGV[2] the value, ARGV[3] the TTL
// in ms ("0": none). Returns {1, fence} when applied, {0, stored} when a
// higher fence is stored. A script runs alone: the comparison and both SETs
// are one step.
//
//go:embed set.lua
var SetLua string

// MigrateLua (migrate.lua) moves an earlier version's fence from
// KEYS[1] (K + ":fence") to KEYS[2] (FenceKey(K)), keeping the higher one.
//
//go:embed migrate.lua
var MigrateLua string

var (
	setScript     = redis.NewScript(SetLua)
	migrateScript = redis.NewScript(MigrateLua)
)

// FenceKey is where the fence of the value key key is stored.
func FenceKey(key string) string { return FencePrefix + key }

// checkKey refuses what Set cannot fence: an empty key, and a key in the
// fences' keyspace (a write there would set another key's stored fence).
func checkKey(key string) error {
	if key == "" {
		return errors.New("redisfence: empty key")
	}
	if strings.HasPrefix(key, FencePrefix) {
		return fmt.Errorf("redisfence: a value key may not start with %q: that keyspace holds the stored fences", FencePrefix)
	}
	return nil
}

// Write is one fenced SET.
type Write struct {
	Key      string        // the value's key
	FenceKey string        // the key of its stored fence; "" is FenceKey(Key); else it must start with FencePrefix
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
	if err := checkKey(w.Key); err != nil {
		return fenceguard.Result{}, err
	}
	if w.TTL < 0 || w.TTL > 0 && w.TTL < time.Millisecond {
		return fenceguard.Result{}, fmt.Errorf("redisfence: TTL %v: want 0 or at least 1ms", w.TTL)
	}
	fk := w.FenceKey
	if fk == "" {
		fk = FenceKey(w.Key)
	} else if !strings.HasPrefix(fk, FencePrefix) || len(fk) == len(FencePrefix) {
		// A fence key outside FencePrefix is a key some value write
		// could name, lowering or breaking this key's fence.
		return fenceguard.Result{}, fmt.Errorf("redisfence: FenceKey must start with %q and name a key", FencePrefix)
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

// MigrateLegacy moves the fence an earlier version stored for key at
// key + ":fence" to FenceKey(key), keeping the higher of the two (the
// stored fence only rises), and returns the fence now stored there ("" when
// none). Run it for each key before the new version's first write to it:
// until then a write under a fence lower than the old stored one would be
// applied. The old key is left as it is.
func MigrateLegacy(ctx context.Context, rdb redis.Scripter, key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	v, err := migrateScript.Run(ctx, rdb, []string{key + ":fence", FenceKey(key)}).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("redisfence: migrate: %w", err)
	}
	s, _ := v.(string)
	return s, nil
}
