package bench

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

// BenchmarkGateway: the lock API's acquire+release cycle over HTTP/JSON (the
// client package, keep-alive) and over gRPC (its GRPCClient), each on a
// real loopback listener, against the floor of the same store called
// in-process — for the embedded bolt store, the Redis store and the
// PostgreSQL store — and, per transport, the same client against a server
// that answers with canned replies (transport_test.go): what the transport
// alone reaches, without any store or fencegate logic.
func BenchmarkGateway(b *testing.B) { runSuite(b, gatewaySuite) }

// gatewaySuite orders each store's subjects floor first: in-process, http,
// grpc, so every gateway number is measured right after its floor. The
// transport floors (store-independent) run once per round, in the Redis
// block, each right before fencegate over the same transport, and the Lua
// floor (luafloor_test.go) right before the HTTP lock API: in-process,
// transport/http, lua-floor, http, transport/grpc, grpc.
func gatewaySuite(tb testing.TB, nw int) []subject {
	var (
		redis *goredis.Client
		lua   cycler
	)
	stores := []struct {
		name string
		open func(testing.TB) lockstore.Store
	}{
		{"bolt", openBolt},
		{"redis", func(tb testing.TB) lockstore.Store {
			s := openRedis(tb)
			redis = s.Client()
			lua = newLuaFloor(s)
			return s
		}},
		{"postgres", openPostgres},
	}
	bare := startTransportFloors(tb, nw)
	var subs []subject
	for _, st := range stores {
		redis, lua = nil, nil
		store := st.open(tb)
		gw := startGateway(tb, store, nw)
		for _, path := range []struct {
			name    string
			c, bare cycler
		}{
			{"in-process", lock.FromStore(store), nil},
			{"http", gw.http, bare.http},
			{"grpc", gw.grpc, bare.grpc},
		} {
			if st.name == "redis" && path.bare != nil {
				id := "gateway/transport/" + path.name
				subs = append(subs, subject{id: id, unit: "cycles/s", op: cycle(path.bare, workerKeys(id, nw))})
			}
			if path.name == "http" && lua != nil {
				id := "gateway/redis/lua-floor"
				subs = append(subs, subject{id: id, unit: "cycles/s", op: cycle(lua, workerKeys(id, nw)), redis: redis})
			}
			id := "gateway/" + st.name + "/" + path.name
			subs = append(subs, subject{id: id, unit: "cycles/s", op: cycle(path.c, workerKeys(id, nw)), redis: redis})
		}
	}
	return subs
}
