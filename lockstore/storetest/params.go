package storetest

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/lockstore/backend"
)

// FenceFloorParam checks a backend's store URL parser for the fenceFloor
// parameter every backend takes: parse is given the query ("" or
// "fenceFloor=…") and returns the Config's FenceFloor. clock and off reach
// the config (clock when absent); anything else is refused naming both.
func FenceFloorParam(t *testing.T, parse func(query string) (backend.FenceFloor, error)) {
	t.Helper()
	for _, c := range []struct {
		query string
		want  backend.FenceFloor
		err   bool
	}{{"", backend.FloorClock, false}, {"fenceFloor=clock", backend.FloorClock, false},
		{"fenceFloor=off", backend.FloorOff, false}, {"fenceFloor=sometimes", 0, true},
		{"fenceFloor=off&fenceFloor=clock", 0, true}} {
		got, err := parse(c.query)
		if c.err {
			if err == nil || !(strings.Contains(err.Error(), "clock") && strings.Contains(err.Error(), "off") || strings.Contains(err.Error(), "2 times")) {
				t.Errorf("parse(?%s) = %v; want an error naming clock and off, or the repetition", c.query, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parse(?%s) = %v, %v; want fenceFloor %s", c.query, got, err, c.want)
		}
	}
}
