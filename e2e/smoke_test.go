package e2e

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// TestGatewayStartsOnEveryStore is the smallest end-to-end proof: the binary
// starts on each store kind, answers /readyz and takes a lock. Redis and
// PostgreSQL report their replication in /readyz and in the log (the test
// servers have no standby: "none").
func TestGatewayStartsOnEveryStore(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			g := StartGateway(t, s.URL)
			waitReady(t, g.URL())
			r := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"smoke"}`})
			if f, _ := r.JSON["fence"].(string); r.Status != 200 || !lockstore.ValidFence(f) {
				t.Fatalf("acquire = %d %s", r.Status, r.Body)
			}
			ready := Do(t, g.URL(), Call{Method: "GET", Path: "/readyz"})
			repl, _ := ready.JSON["replication"].(map[string]any)
			switch s.Name {
			case "redis", "postgres":
				if repl["mode"] != lockstore.ReplicationNone || !strings.Contains(g.Logs(), `"store replication`) {
					t.Errorf("/readyz = %s; want replication mode none, and the start-up log line", ready.Body)
				}
			default:
				if repl != nil {
					t.Errorf("/readyz = %s; %s reports no replication", ready.Body, s.Name)
				}
			}
		})
	}
}
