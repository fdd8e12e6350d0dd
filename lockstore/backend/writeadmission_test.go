package backend

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

func TestWriteAdmissionValidate(t *testing.T) {
	good := lockstore.WriteAdmission{Fence: "000000000000007", WriteID: strings.Repeat("A", 22), MaxWrite: 1500 * time.Millisecond}
	if ms, err := ValidateAdmission(good); err != nil || ms != 1500 {
		t.Fatalf("Validate(good) = %d, %v; want 1500, nil", ms, err)
	}
	sub := good
	sub.MaxWrite = 2*time.Millisecond + 999*time.Microsecond
	if ms, err := ValidateAdmission(sub); err != nil || ms != 2 {
		t.Errorf("Validate(2.999ms) = %d, %v; want 2 (truncated), nil", ms, err)
	}
	for _, c := range []struct {
		name string
		mod  func(*lockstore.WriteAdmission)
	}{
		{"short fence", func(a *lockstore.WriteAdmission) { a.Fence = "7" }},
		{"fence with sign", func(a *lockstore.WriteAdmission) { a.Fence = "+00000000000007" }},
		{"empty write id", func(a *lockstore.WriteAdmission) { a.WriteID = "" }},
		{"write id with '+'", func(a *lockstore.WriteAdmission) { a.WriteID = strings.Repeat("A", 21) + "+" }},
		{"zero maxWrite", func(a *lockstore.WriteAdmission) { a.MaxWrite = 0 }},
		{"sub-millisecond maxWrite", func(a *lockstore.WriteAdmission) { a.MaxWrite = 999 * time.Microsecond }},
		{"negative maxWrite", func(a *lockstore.WriteAdmission) { a.MaxWrite = -time.Second }},
		{"maxWrite over the limit", func(a *lockstore.WriteAdmission) { a.MaxWrite = lockstore.MaxWriteLimit + time.Millisecond }},
	} {
		a := good
		c.mod(&a)
		if _, err := ValidateAdmission(a); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("%s: Validate = %v, want InvalidArgument", c.name, err)
		}
	}
	if err := ValidateWriteID(strings.Repeat("x", 21) + "\u0430"); err == nil || strings.Contains(err.Error(), "x") {
		t.Errorf("ValidateWriteID error %v must exist and not echo the input", err)
	}
}

func TestWriteAdmissionApply(t *testing.T) {
	const f1, f2, f3 = "000000000000001", "000000000000002", "000000000000003"
	live := func(f string) lockstore.KeyState {
		return lockstore.KeyState{Live: &lockstore.Lock{Fence: f}, LatestFence: f, NowMs: 1000}
	}
	released := lockstore.KeyState{LatestFence: f2, NowMs: 1000}
	id := func(c byte) string { return strings.Repeat(string(c), 22) }
	for _, c := range []struct {
		name         string
		a            lockstore.WriteAdmission
		ks           lockstore.KeyState
		entries      map[string]WriteEntry
		admitted     bool
		blocking     int
		until        int64
		wantEntries  []string // ids left afterwards
		wantDeadline int64    // of the new entry, when admitted
	}{
		{name: "current holder, no entries", a: lockstore.WriteAdmission{Fence: f2, RequireLive: true, WriteID: id('a')},
			ks: live(f2), admitted: true, wantEntries: []string{id('a')}, wantDeadline: 1000 + 500},
		{name: "same fence never blocks", a: lockstore.WriteAdmission{Fence: f2, RequireLive: true, WriteID: id('a')},
			ks: live(f2), entries: map[string]WriteEntry{id('b'): {f2, 5000}}, admitted: true,
			wantEntries: []string{id('a'), id('b')}, wantDeadline: 1500},
		{name: "older entries block", a: lockstore.WriteAdmission{Fence: f3, RequireLive: true, WriteID: id('a')},
			ks: live(f3), entries: map[string]WriteEntry{id('b'): {f1, 4000}, id('c'): {f2, 7000}, id('d'): {f3, 9000}},
			blocking: 2, until: 7000, wantEntries: []string{id('b'), id('c'), id('d')}},
		{name: "expired entries neither block nor stay", a: lockstore.WriteAdmission{Fence: f3, RequireLive: true, WriteID: id('a')},
			ks: live(f3), entries: map[string]WriteEntry{id('b'): {f1, 1000}, id('c'): {f2, 999}},
			admitted: true, wantEntries: []string{id('a')}, wantDeadline: 1500},
		{name: "holder policy, released", a: lockstore.WriteAdmission{Fence: f2, RequireLive: true, WriteID: id('a')},
			ks: released, entries: map[string]WriteEntry{id('b'): {f1, 900}}, wantEntries: nil},
		{name: "latest policy, released", a: lockstore.WriteAdmission{Fence: f2, WriteID: id('a')},
			ks: released, admitted: true, wantEntries: []string{id('a')}, wantDeadline: 1500},
		{name: "stale fence registers nothing", a: lockstore.WriteAdmission{Fence: f1, WriteID: id('a')},
			ks: live(f2), entries: map[string]WriteEntry{}, wantEntries: nil},
		{name: "unknown key", a: lockstore.WriteAdmission{Fence: f1, WriteID: id('a')}, ks: lockstore.KeyState{NowMs: 1000}},
		{name: "re-registering replaces", a: lockstore.WriteAdmission{Fence: f2, WriteID: id('a')},
			ks: live(f2), entries: map[string]WriteEntry{id('a'): {f2, 1200}}, admitted: true,
			wantEntries: []string{id('a')}, wantDeadline: 1500},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries := map[string]WriteEntry{}
			for k, v := range c.entries {
				entries[k] = v
			}
			r, _ := ApplyAdmission(c.a, entries, c.ks, 500)
			if r.Admitted != c.admitted || r.Blocking != c.blocking || r.BlockedUntilMs != c.until {
				t.Fatalf("Apply = admitted %v blocking %d until %d; want %v %d %d",
					r.Admitted, r.Blocking, r.BlockedUntilMs, c.admitted, c.blocking, c.until)
			}
			if len(entries) != len(c.wantEntries) {
				t.Fatalf("entries after Apply = %v, want ids %v", entries, c.wantEntries)
			}
			for _, id := range c.wantEntries {
				if _, ok := entries[id]; !ok {
					t.Fatalf("entry %s missing after Apply: %v", id, entries)
				}
			}
			if c.admitted {
				if e := entries[c.a.WriteID]; e.Fence != c.a.Fence || e.DeadlineMs != c.wantDeadline {
					t.Errorf("new entry = %+v, want fence %s deadline %d", e, c.a.Fence, c.wantDeadline)
				}
			}
		})
	}
}

// TestWriteAdmissionInFlightCap: MaxInFlight is validated before any I/O
// (0 is the default), and Apply refuses one entry past the cap with Full,
// registering nothing, while expired entries and a re-registered id do not
// count.
func TestWriteAdmissionInFlightCap(t *testing.T) {
	good := lockstore.WriteAdmission{Fence: "000000000000007", WriteID: strings.Repeat("A", 22), MaxWrite: time.Second}
	for _, n := range []int{0, 1, lockstore.MaxInFlightLimit} {
		a := good
		a.MaxInFlight = n
		if _, err := ValidateAdmission(a); err != nil {
			t.Errorf("MaxInFlight %d: %v", n, err)
		}
	}
	for _, n := range []int{-1, lockstore.MaxInFlightLimit + 1} {
		a := good
		a.MaxInFlight = n
		if _, err := ValidateAdmission(a); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("MaxInFlight %d: %v, want InvalidArgument", n, err)
		}
	}
	if (lockstore.WriteAdmission{}).InFlightCap() != lockstore.DefaultMaxInFlight {
		t.Errorf("InFlightCap of 0 = %d, want %d", (lockstore.WriteAdmission{}).InFlightCap(), lockstore.DefaultMaxInFlight)
	}
	ks := lockstore.KeyState{Live: &lockstore.Lock{Fence: good.Fence}, LatestFence: good.Fence, NowMs: 1000}
	id := func(c byte) string { return strings.Repeat(string(c), 22) }
	entries := map[string]WriteEntry{
		id('x'): {Fence: good.Fence, DeadlineMs: 1000}, // expired: does not count
		id('a'): {Fence: good.Fence, DeadlineMs: 5000},
		id('b'): {Fence: good.Fence, DeadlineMs: 5000},
	}
	a := good
	a.RequireLive, a.MaxInFlight, a.WriteID = true, 2, id('c')
	res, _ := ApplyAdmission(a, entries, ks, 1000)
	if res.Admitted || !res.Full || res.Blocking != 0 {
		t.Fatalf("Apply at the cap = %+v, want Full", res)
	}
	if _, ok := entries[id('c')]; ok || len(entries) != 2 {
		t.Fatalf("Apply at the cap left %v, want a and b only", entries)
	}
	a.WriteID = id('a')
	if res, _ := ApplyAdmission(a, entries, ks, 1000); !res.Admitted || res.Full {
		t.Fatalf("Apply re-registering an id in flight at the cap = %+v, want admitted", res)
	}
}
