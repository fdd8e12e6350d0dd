package e2e

import "testing"

// TestGatewayStartsOnEveryStore is the smallest end-to-end proof: the binary
// starts on each store kind, answers /readyz and takes a lock.
func TestGatewayStartsOnEveryStore(t *testing.T) {
	for _, s := range Stores(t) {
		t.Run(s.Name, func(t *testing.T) {
			g := StartGateway(t, s.URL)
			waitReady(t, g.URL())
			r := Do(t, g.URL(), Call{Method: "POST", Path: "/v1/locks/acquire", Body: `{"key":"smoke"}`})
			if r.Status != 200 || r.JSON["fence"] != "000000000000001" {
				t.Fatalf("acquire = %d %s", r.Status, r.Body)
			}
		})
	}
}
