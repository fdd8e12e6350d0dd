package storetest

// What the write barrier keeps and leaves alone in the store: locks and counters
// untouched, entries across a reopen, the sweep, input validation, the per-key cap.

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// barrierUntouched: Admit and Finish, whatever they decide, leave locks and
// fence counters as they were.
func (s *suite) barrierUntouched(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key, free = "untouched", "untouched-free"
	a := acquire(t, st, key, time.Minute)
	ksBefore := inspect(t, st, key)
	infoBefore, err := st.LookupKey(ctx(t), key)
	if err != nil || infoBefore == nil {
		t.Fatalf("LookupKey = %v, %v", infoBefore, err)
	}

	// A maxWrite other than the lock's TTL: on a fake clock that stands
	// still, a store that set the lock's expiry to now+maxWrite would
	// otherwise write back the same value.
	w := adm(t, a.Fence, true, 30*time.Second)
	wantAdmitted(t, "Admit(current)", admit(t, st, key, w))
	next := fence(t, fenceNum(t, a.Fence)+1)
	wantRefused(t, "Admit(next fence, not issued)", admit(t, st, key, adm(t, next, false, time.Minute)), 0)
	wantRefused(t, "Admit(free key)", admit(t, st, free, adm(t, fence(t, 1), false, time.Minute)), 0)
	finish(t, st, key, w.WriteID)
	finish(t, st, free, writeID(t))

	ksAfter := inspect(t, st, key)
	if ksAfter.LatestFence != ksBefore.LatestFence || ksAfter.Live == nil || *ksAfter.Live != *ksBefore.Live {
		t.Fatalf("Inspect after Admit/Finish = live %v latest %q, want unchanged (live %v latest %q)",
			ksAfter.Live, ksAfter.LatestFence, ksBefore.Live, ksBefore.LatestFence)
	}
	infoAfter, err := st.LookupKey(ctx(t), key)
	if err != nil || infoAfter == nil || *infoAfter != *infoBefore {
		t.Fatalf("LookupKey after Admit/Finish = %v, %v; want %v", infoAfter, err, infoBefore)
	}
	if locked, err := st.IsLocked(ctx(t), free); err != nil || locked {
		t.Fatalf("IsLocked(free key) after Admit = %v, %v; want false", locked, err)
	}
	if ks := inspect(t, st, free); ks.Live != nil || ks.LatestFence != "" {
		t.Fatalf("Inspect(free key) after Admit = live %s latest %q, want empty", liveFence(ks), ks.LatestFence)
	}
	if b := handover(t, st, key, a); b.Fence != next {
		t.Fatalf("fence after Admit/Finish = %s, want %s", b.Fence, next)
	}
	if f := acquire(t, st, free, time.Minute).Fence; f != fence(t, 1) {
		t.Fatalf("first fence of the free key = %s, want %s", f, fence(t, 1))
	}
}

// barrierSurvivesReopen: in-flight entries live in the store, so a gateway
// restart does not forget them.
func (s *suite) barrierSurvivesReopen(t *caseT) {
	ns := newNS(t)
	st := s.openConsecutive(t, ns)
	const key = "reopen"
	a := acquire(t, st, key, time.Minute)
	w := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit", admit(t, st, key, w))
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	st2 := s.openConsecutive(t, ns)
	b := handover(t, st2, key, a)
	wantRefused(t, "Admit(newer fence) after reopen", admit(t, st2, key, adm(t, b.Fence, true, time.Minute)), 1)
	finish(t, st2, key, w.WriteID)
	wantAdmitted(t, "Admit(newer fence) after reopen and Finish", admit(t, st2, key, adm(t, b.Fence, true, time.Minute)))
}

// barrierSweep: after SweepBarrier an entry past its deadline no longer
// blocks, an unexpired entry of another key still does, and every lock and
// fence counter is as it was; a limit of 0 is refused. (That the sweep
// itself removed and counted the entry: barrierSweepCounts.)
func (s *suite) barrierSweep(t *caseT) {
	st, _ := s.freshConsecutive(t)
	sw, ok := st.(lockstore.BarrierSweeper)
	if !ok {
		t.Fatalf("the store (%T) does not implement lockstore.BarrierSweeper", st)
	}
	const expiring, live = "sweep-expiring", "sweep-live"
	const maxWrite = 1500 * time.Millisecond
	x := acquire(t, st, expiring, time.Minute)
	l := acquire(t, st, live, time.Minute)
	wantAdmitted(t, "Admit(live key)", admit(t, st, live, adm(t, l.Fence, true, time.Minute)))
	wantAdmitted(t, "Admit(expiring key)", admit(t, st, expiring, adm(t, x.Fence, true, maxWrite)))
	after := t.nowMs()
	ksX, ksL := inspect(t, st, expiring), inspect(t, st, live)

	// Past the deadline on any clock within the tolerance of ours (a
	// backend may add the tolerance to deadlines, as Firestore does).
	t.sleepUntil(after + maxWrite.Milliseconds() + 2*lockstore.TimeToleranceMs + s.margin)
	removed, err := sw.SweepBarrier(ctx(t), 1000)
	if err != nil {
		t.Fatalf("SweepBarrier: %v", err)
	}
	if removed > 1000 || removed < 0 {
		t.Fatalf("SweepBarrier(limit 1000) removed %d", removed)
	}
	if _, err := sw.SweepBarrier(ctx(t), 0); err == nil {
		t.Errorf("SweepBarrier(limit 0) succeeded, want InvalidArgument")
	} else {
		wantCode(t, "SweepBarrier(limit 0)", err, lockstore.InvalidArgument)
	}

	for _, k := range []struct {
		key  string
		want lockstore.KeyState
	}{{expiring, ksX}, {live, ksL}} {
		got := inspect(t, st, k.key)
		if got.LatestFence != k.want.LatestFence || got.Live == nil || *got.Live != *k.want.Live {
			t.Fatalf("Inspect(%s) after the sweep = live %v latest %q, want unchanged (live %v latest %q)",
				k.key, got.Live, got.LatestFence, k.want.Live, k.want.LatestFence)
		}
	}
	// The live entry still blocks a newer fence; the expired one does not.
	b := handover(t, st, live, l)
	wantRefused(t, "Admit(newer fence) beside an unexpired entry after the sweep",
		admit(t, st, live, adm(t, b.Fence, true, time.Minute)), 1)
	y := handover(t, st, expiring, x)
	wantAdmitted(t, "Admit(newer fence) after the sweep", admit(t, st, expiring, adm(t, y.Fence, true, time.Minute)))
}

// barrierValidation: malformed keys, fences, write ids and maxWrite fail
// with InvalidArgument before any I/O (an already cancelled context would
// otherwise say Aborted); a well-formed call with a dead context is
// Aborted or NetworkTimeout and registers nothing.
func (s *suite) barrierValidation(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "valid"
	a := acquire(t, st, key, time.Minute)
	good := adm(t, a.Fence, true, time.Minute)

	var calls []op
	for _, k := range badKeys {
		calls = append(calls,
			op{"Admit/key=" + k.name, func(c context.Context) error { _, err := st.Admit(c, k.key, good); return err }},
			op{"Finish/key=" + k.name, func(c context.Context) error { return st.Finish(c, k.key, good.WriteID) }})
	}
	for _, f := range []struct{ name, fence string }{
		{"empty", ""}, {"short", "42"}, {"16-digits", "0000000000000001"}, {"letter", "00000000000000a"},
		{"plus", "+00000000000001"}, {"space", " 00000000000001"},
	} {
		bad := good
		bad.Fence = f.fence
		calls = append(calls, op{"Admit/fence=" + f.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }})
	}
	for _, l := range badLockIDs {
		bad := good
		bad.WriteID = l.id
		calls = append(calls,
			op{"Admit/writeId=" + l.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }},
			op{"Finish/writeId=" + l.name, func(c context.Context) error { return st.Finish(c, key, l.id) }})
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"zero", 0}, {"negative", -time.Second}, {"500us", 500 * time.Microsecond}, {"over-limit", lockstore.MaxWriteLimit + time.Millisecond}} {
		bad := good
		bad.MaxWrite = d.d
		calls = append(calls, op{"Admit/maxWrite=" + d.name, func(c context.Context) error { _, err := st.Admit(c, key, bad); return err }})
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range calls {
		wantCode(t, c.name, c.do(ctx(t)), lockstore.InvalidArgument)
		wantCode(t, c.name+" (cancelled ctx: validation comes before I/O)", c.do(cancelled), lockstore.InvalidArgument)
	}
	_, err := st.Admit(cancelled, key, good)
	wantCode(t, "Admit(cancelled)", err, lockstore.Aborted)
	_, err = st.Admit(expired, key, good)
	wantCode(t, "Admit(expired deadline)", err, lockstore.NetworkTimeout)
	wantCode(t, "Finish(cancelled)", st.Finish(cancelled, key, good.WriteID), lockstore.Aborted)
	wantCode(t, "Finish(expired deadline)", st.Finish(expired, key, good.WriteID), lockstore.NetworkTimeout)

	// Nothing was registered: the next fence is not blocked.
	b := handover(t, st, key, a)
	wantAdmitted(t, "Admit(newer fence) after rejected admissions", admit(t, st, key, adm(t, b.Fence, true, time.Minute)))
}

// barrierBounded: a key's writes in flight are capped (MaxInFlight): past
// the cap a matching, unblocked fence is refused with Full and nothing is
// registered; entries past their deadline do not count; re-registering a
// write id in flight is not one more; Finish makes room; the cap is per key;
// a fence that does not match or is blocked is never reported Full.
func (s *suite) barrierBounded(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key, other = "bounded", "bounded-other"
	const capN = 48
	const short = 1500 * time.Millisecond
	a := acquire(t, st, key, time.Minute)
	capped := func(fence string, maxWrite time.Duration) lockstore.WriteAdmission {
		w := adm(t, fence, true, maxWrite)
		w.MaxInFlight = capN
		return w
	}
	wantFull := func(what string, r lockstore.WriteAdmitResult) {
		t.Helper()
		if r.Admitted || !r.Full || r.Blocking != 0 {
			t.Fatalf("%s: Admitted=%v Full=%v Blocking=%d, want refused as Full with nothing blocking", what, r.Admitted, r.Full, r.Blocking)
		}
	}
	notFull := func(what string, r lockstore.WriteAdmitResult) {
		t.Helper()
		if r.Full {
			t.Fatalf("%s: Full=true, want Full only for a matching, unblocked fence", what)
		}
	}

	// capN abandoned writes that expire: once past their deadline they
	// must not count against the cap.
	for i := range capN {
		r := admit(t, st, key, capped(a.Fence, short))
		notFull(fmt.Sprintf("Admit #%d of %d (short)", i+1, capN), r)
		wantAdmitted(t, fmt.Sprintf("Admit #%d of %d (short)", i+1, capN), r)
	}
	t.sleepUntil(t.nowMs() + short.Milliseconds() + 2*lockstore.TimeToleranceMs + s.margin)

	var first lockstore.WriteAdmission
	for i := range capN {
		w := capped(a.Fence, time.Minute)
		if i == 0 {
			first = w
		}
		r := admit(t, st, key, w)
		notFull(fmt.Sprintf("Admit #%d of %d after the first %d expired", i+1, capN, capN), r)
		wantAdmitted(t, fmt.Sprintf("Admit #%d of %d after the first %d expired", i+1, capN, capN), r)
	}
	wantFull("Admit past the cap", admit(t, st, key, capped(a.Fence, time.Minute)))
	wantFull("Admit past the cap, policy latest", admit(t, st, key, lockstore.WriteAdmission{
		Fence: a.Fence, WriteID: writeID(t), MaxWrite: time.Minute, MaxInFlight: capN}))
	wantAdmitted(t, "Admit(a write id already in flight) at the cap", admit(t, st, key, first))
	finish(t, st, key, first.WriteID)
	wantAdmitted(t, "Admit after one Finish at the cap", admit(t, st, key, capped(a.Fence, time.Minute)))
	wantFull("Admit past the cap again", admit(t, st, key, capped(a.Fence, time.Minute)))

	// Another key has its own cap.
	o := acquire(t, st, other, time.Minute)
	wantAdmitted(t, "Admit on another key while the first is at its cap", admit(t, st, other, capped(o.Fence, time.Minute)))
	// The cap is the admission's: the default (DefaultMaxInFlight) lets
	// one more in.
	wantAdmitted(t, "Admit with the default cap", admit(t, st, key, adm(t, a.Fence, true, time.Minute)))

	// The refused admissions registered nothing: the newer fence is
	// blocked by exactly the capN+1 admitted, unexpired writes, and a
	// stale or blocked fence is not Full.
	b := handover(t, st, key, a)
	r := admit(t, st, key, capped(b.Fence, time.Minute))
	notFull("Admit(newer fence) behind writes at the cap", r)
	wantRefused(t, "Admit(newer fence) behind writes at the cap", r, capN+1)
	r = admit(t, st, key, capped(a.Fence, time.Minute))
	notFull("Admit(stale fence) at the cap", r)
	wantRefused(t, "Admit(stale fence) at the cap", r, 0)
}

// barrierSweepCounts: SweepBarrier removes an entry past its deadline and
// counts it, once. It needs SweepCounts: a store whose entries expire by
// themselves (Redis) answers ErrNotSupported and the case is skipped.
func (s *suite) barrierSweepCounts(t *caseT) {
	st := s.openWith(t, newNS(t), Options{FenceFloor: backend.FloorOff, Need: []Feature{SweepCounts}})
	sw, ok := st.(lockstore.BarrierSweeper)
	if !ok {
		t.Fatalf("the store (%T) does not implement lockstore.BarrierSweeper", st)
	}
	const key = "sweep-counts"
	const maxWrite = 1500 * time.Millisecond
	a := acquire(t, st, key, time.Minute)
	wantAdmitted(t, "Admit", admit(t, st, key, adm(t, a.Fence, true, maxWrite)))
	after := t.nowMs()
	if removed, err := sw.SweepBarrier(ctx(t), 1000); err != nil || removed != 0 {
		t.Fatalf("SweepBarrier before the deadline = %d, %v; want 0 removed", removed, err)
	}
	t.sleepUntil(after + maxWrite.Milliseconds() + 2*lockstore.TimeToleranceMs + s.margin)
	if removed, err := sw.SweepBarrier(ctx(t), 1000); err != nil || removed != 1 {
		t.Fatalf("SweepBarrier past the deadline = %d, %v; want the expired entry removed and counted", removed, err)
	}
	if removed, err := sw.SweepBarrier(ctx(t), 1000); err != nil || removed != 0 {
		t.Fatalf("SweepBarrier again = %d, %v; want 0 (the entry is gone)", removed, err)
	}
}
