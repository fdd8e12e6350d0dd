package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// referenceEncode is the lock value encoder the scripts used before they
// built the value inline (one cjson.encode per string field), kept verbatim
// as the reference the inline builders must match byte for byte. It decodes
// the value it is given with cjson and re-encodes its fields.
const referenceEncode = `
local function encode(lockId, exp, acq, key, fence)
  return '{"lockId":' .. cjson.encode(lockId) ..
    ',"expiresAtMs":' .. string.format('%d', exp) ..
    ',"acquiredAtMs":' .. string.format('%d', acq) ..
    ',"key":' .. cjson.encode(key) ..
    ',"fence":' .. cjson.encode(fence) .. '}'
end
local d = cjson.decode(ARGV[1])
return encode(d.lockId, d.expiresAtMs, d.acquiredAtMs, d.key, d.fence)
`

// reference returns what the old encoder writes for the fields of raw.
func reference(ctx context.Context, c *goredis.Client, raw string) (string, error) {
	return c.Eval(ctx, referenceEncode, nil, raw).Text()
}

// naiveValue is a deliberately broken encoder: it quotes the key by hand
// without cjson's escaping. TestValueEncoding shows the comparison with the
// reference catches it.
func naiveValue(lockID string, exp, acq int64, key, fence string) string {
	return fmt.Sprintf(`{"lockId":"%s","expiresAtMs":%d,"acquiredAtMs":%d,"key":"%s","fence":"%s"}`,
		lockID, exp, acq, key, fence)
}

// encodingKeys are user keys whose JSON form exercises everything cjson
// escapes ('"', '\\', '/', control bytes including DEL's neighbours) and
// everything it passes through (non-ASCII UTF-8, '<', '&'), and the longest
// key there is.
func encodingKeys() []string {
	var ascii strings.Builder
	for b := 1; b < 0x80; b++ {
		ascii.WriteByte(byte(b))
	}
	return []string{
		"plain",
		"orders/42",
		`quote"d`,
		`back\slash`,
		"tab\tnl\ncr\rff\fbs\b",
		"\x01\x1f\x7f",
		ascii.String(),
		"</script>&'",
		"unicode é 日本 🔒 \u2028\u2029",
		strings.Repeat("k/", 256),
	}
}

// TestValueEncoding: the lock value the acquire and extend scripts build by
// hand is byte-identical to the old cjson-built one, for keys with every
// character cjson escapes; and the check catches an encoder that quotes
// the key without escaping.
func TestValueEncoding(t *testing.T) {
	s := openPrefix(t, "syncguard_test_encoding")
	t.Cleanup(func() { dropPrefix(t, s.Client(), s.Prefix()) })
	ctx := context.Background()
	c := s.Client()

	caught := 0
	for _, key := range encodingKeys() {
		r, err := s.Acquire(ctx, key, 30*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("Acquire(%q) = %+v, %v", key, r, err)
		}
		lk := mustKey(t, s.LockKey, key)
		raw := c.Get(ctx, lk).Val()
		want, err := reference(ctx, c, raw)
		if err != nil {
			t.Fatalf("reference encoder: %v", err)
		}
		if raw != want {
			t.Errorf("acquire(%q) wrote\n  %s\nthe old encoder writes\n  %s", key, raw, want)
		}
		held, err := decodeLock(raw)
		if err != nil || held.Key != key || held.LockID != r.LockID || held.Fence != r.Fence || held.ExpiresAtMs != r.ExpiresAtMs {
			t.Errorf("acquire(%q) value %s decodes to %+v, %v", key, raw, held, err)
		} else if naive := naiveValue(held.LockID, held.ExpiresAtMs, held.AcquiredAtMs, held.Key, held.Fence); naive != want {
			caught++
		} else if strings.ContainsAny(key, "\"\\/\x01") {
			t.Errorf("the naive encoder matches the reference for %q; the comparison cannot catch it", key)
		}

		e, err := s.Extend(ctx, r.LockID, 40*time.Second)
		if err != nil || !e.OK {
			t.Fatalf("Extend(%q) = %+v, %v", key, e, err)
		}
		raw = c.Get(ctx, lk).Val()
		if want, _ := reference(ctx, c, raw); raw != want {
			t.Errorf("extend(%q) wrote\n  %s\nthe old encoder writes\n  %s", key, raw, want)
		}
		if _, err := s.Release(ctx, r.LockID); err != nil {
			t.Fatal(err)
		}
	}
	// Every key but "plain" and the non-ASCII one needs escaping.
	if want := len(encodingKeys()) - 2; caught != want {
		t.Errorf("the naive encoder differed from the reference on %d keys, want %d", caught, want)
	}

	// Extend of a lock SyncGuard's own cjson.encode wrote (other field
	// order, escaped slash): the rewritten value is the old encoder's.
	const id = "SyncGuardWroteThis0123"
	now := time.Now().UnixMilli()
	lk := mustKey(t, s.LockKey, "sg/enc")
	sg := fmt.Sprintf(`{"fence":"000000000000007","key":"sg\/enc","acquiredAtMs":%d,"lockId":"%s","expiresAtMs":%d}`, now, id, now+20000)
	c.Set(ctx, lk, sg, 20*time.Second)
	c.Set(ctx, mustKey(t, s.IndexKey, id), lk, 20*time.Second)
	if e, err := s.Extend(ctx, id, 5*time.Second); err != nil || !e.OK {
		t.Fatalf("Extend of a SyncGuard lock = %+v, %v", e, err)
	}
	raw := c.Get(ctx, lk).Val()
	if want, _ := reference(ctx, c, raw); raw != want {
		t.Errorf("extend of a SyncGuard lock wrote\n  %s\nthe old encoder writes\n  %s", raw, want)
	}
	if !strings.Contains(raw, fmt.Sprintf(`"acquiredAtMs":%d,`, now)) || !strings.Contains(raw, `"key":"sg\/enc"`) {
		t.Errorf("extend of a SyncGuard lock wrote %s; acquiredAtMs and key must survive", raw)
	}
}
