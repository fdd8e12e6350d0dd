package bench

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// BenchmarkFenceFloor: what the clock floor (docs/fences.md) costs an
// acquire+release cycle, on each store called in-process: the same store
// with fenceFloor=off (the floor of this comparison: counter+1, as before
// the floor) and with the default, fenceFloor=clock. Both are one store
// round trip; the floor adds a clock read (Redis already read TIME;
// PostgreSQL reads clock_timestamp() once more) and a comparison.
func BenchmarkFenceFloor(b *testing.B) { runSuite(b, floorSuite) }

// floorSuite orders each store's subjects off first, then clock.
func floorSuite(tb testing.TB, nw int) []subject {
	var subs []subject
	for _, st := range []struct {
		name string
		open func(testing.TB, backend.FenceFloor) (lockstore.Store, *goredis.Client)
	}{
		{"bolt", func(tb testing.TB, f backend.FenceFloor) (lockstore.Store, *goredis.Client) {
			return openBoltFloor(tb, f), nil
		}},
		{"redis", func(tb testing.TB, f backend.FenceFloor) (lockstore.Store, *goredis.Client) {
			s := openRedisFloor(tb, f)
			return s, s.Client()
		}},
		{"postgres", func(tb testing.TB, f backend.FenceFloor) (lockstore.Store, *goredis.Client) {
			return openPostgresFloor(tb, f), nil
		}},
	} {
		for _, f := range []backend.FenceFloor{backend.FloorOff, backend.FloorClock} {
			store, redis := st.open(tb, f)
			id := "floor/" + st.name + "/" + f.String()
			subs = append(subs, subject{id: id, unit: "cycles/s", op: cycle(lock.FromStore(store), workerKeys(id, nw)), redis: redis})
		}
	}
	return subs
}
