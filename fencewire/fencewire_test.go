package fencewire_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fencewire"
)

// TestStandardLibraryOnly: fenceguard links this package into the protected
// API, so it may pull nothing but the standard library.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 1 || got[0] != "github.com/fencegate/fencegate/fencewire" {
		t.Errorf("fencewire depends on %v, want only the standard library", got)
	}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		reason string
		want   int
	}{
		{fencewire.ReasonMissing, 428}, {fencewire.ReasonMalformed, 400}, {fencewire.ReasonStale, 409},
		{fencewire.ReasonNotHeld, 409}, {fencewire.ReasonUnknown, 409}, {fencewire.ReasonWrongOwner, 409},
		{fencewire.ReasonBadProof, 403}, {fencewire.ReasonUnavailable, 503}, {fencewire.ReasonDraining, 429},
		{fencewire.ReasonTooManyWrites, 429}, {"", 503}, {"no-such-reason", 503},
	} {
		if got := fencewire.Status(c.reason); got != c.want {
			t.Errorf("Status(%q) = %d, want %d", c.reason, got, c.want)
		}
	}
}

func TestDenialJSON(t *testing.T) {
	got := string(fencewire.Denial{Error: "stale", Key: "orders/<42>&é", Presented: "000000000000007",
		Current: "000000000000009", DecisionID: "AbC"}.JSON())
	want := `{"error":"stale","key":"orders/\u003c42\u003e\u0026é","presented":"000000000000007","current":"000000000000009","decisionId":"AbC"}`
	if got != want {
		t.Errorf("body %s, want %s", got, want)
	}
}
