package storetest

// The write barrier's admission rule: which fences Admit lets in, what blocks them, and
// how entries end (Finish, their deadline).

import (
	"fmt"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// barrierAdmitCurrent: the live holder's fence is admitted under both
// policies, and the state returned is Inspect's.
func (s *suite) barrierAdmitCurrent(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "current"
	a := acquire(t, st, key, time.Minute)
	for _, live := range []bool{true, false} {
		r := admit(t, st, key, adm(t, a.Fence, live, time.Minute))
		wantAdmitted(t, fmt.Sprintf("Admit(current fence, requireLive=%v)", live), r)
		wantSameState(t, "Admit", r.State, inspect(t, st, key))
		if r.State.Live == nil || r.State.Live.LockID != a.LockID || r.State.Live.Key != key || r.State.LatestFence != a.Fence {
			t.Errorf("Admit: State = live %v latest %q, want the lock just acquired with fence %s",
				liveFence(r.State), r.State.LatestFence, a.Fence)
		}
	}
}

// barrierSameFence: writes under one fence never block each other, and
// re-registering a write id replaces its entry instead of adding one.
func (s *suite) barrierSameFence(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "same"
	a := acquire(t, st, key, time.Minute)
	w1 := adm(t, a.Fence, true, time.Minute)
	w2 := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit(first write)", admit(t, st, key, w1))
	wantAdmitted(t, "Admit(second write, same fence)", admit(t, st, key, w2))
	wantAdmitted(t, "Admit(first write again, same id)", admit(t, st, key, w1))

	b := handover(t, st, key, a)
	r := admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	wantRefused(t, "Admit(newer fence) with two writes in flight", r, 2)
}

// barrierNewerBlocked: an unfinished write under the older fence keeps the
// newer fence out, with its deadline reported; Finish lets it in, one
// entry at a time.
func (s *suite) barrierNewerBlocked(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "blocked"
	const maxWrite = time.Minute
	a := acquire(t, st, key, time.Minute)
	w1 := adm(t, a.Fence, true, maxWrite)
	w2 := adm(t, a.Fence, false, 30*time.Second)
	before := t.nowMs()
	wantAdmitted(t, "Admit(w1)", admit(t, st, key, w1))
	after := t.nowMs()
	wantAdmitted(t, "Admit(w2)", admit(t, st, key, w2))

	b := handover(t, st, key, a)
	for _, live := range []bool{true, false} {
		r := admit(t, st, key, adm(t, b.Fence, live, maxWrite))
		wantRefused(t, fmt.Sprintf("Admit(newer fence, requireLive=%v) with two older writes in flight", live), r, 2)
		checkDeadline(t, "Admit(newer fence)", r.BlockedUntilMs, before, after, maxWrite)
		wantSameState(t, "Admit(newer fence)", r.State, inspect(t, st, key))
		if r.State.Live == nil || r.State.Live.Fence != b.Fence {
			t.Errorf("refused Admit: State.Live fence %s, want the new holder's %s", liveFence(r.State), b.Fence)
		}
	}

	finish(t, st, key, w1.WriteID)
	r := admit(t, st, key, adm(t, b.Fence, true, maxWrite))
	wantRefused(t, "Admit(newer fence) after one of two older writes finished", r, 1)
	checkDeadline(t, "Admit(newer fence) blocked by w2 only", r.BlockedUntilMs, before, t.nowMs(), 30*time.Second)
	finish(t, st, key, w2.WriteID)
	n1 := adm(t, b.Fence, true, maxWrite)
	wantAdmitted(t, "Admit(newer fence) after both older writes finished", admit(t, st, key, n1))
	// Same or newer-fence entries never block.
	wantAdmitted(t, "Admit(newer fence) beside its own write", admit(t, st, key, adm(t, b.Fence, false, maxWrite)))
}

// barrierExpiredEntry: an entry past its deadline counts as finished even
// though Finish never came.
func (s *suite) barrierExpiredEntry(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "expired"
	const maxWrite = 1500 * time.Millisecond
	a := acquire(t, st, key, time.Minute)
	before := t.nowMs()
	wantAdmitted(t, "Admit(older)", admit(t, st, key, adm(t, a.Fence, true, maxWrite)))
	after := t.nowMs()
	b := handover(t, st, key, a)
	r := admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	if r.Admitted {
		// Only a machine loaded enough to spend 1.5 s on a handover gets
		// here; the entry then has to have expired.
		if t.nowMs() < after+maxWrite.Milliseconds()-lockstore.TimeToleranceMs {
			t.Fatalf("Admit(newer fence) admitted while the older write was in flight")
		}
		return
	}
	wantRefused(t, "Admit(newer fence) with the older write in flight", r, 1)
	checkDeadline(t, "Admit(newer fence)", r.BlockedUntilMs, before, after, maxWrite)

	t.sleepUntil(r.BlockedUntilMs + s.margin)
	r = admit(t, st, key, adm(t, b.Fence, true, time.Minute))
	wantAdmitted(t, "Admit(newer fence) after the older entry's deadline", r)
}

// barrierPolicy: after a release the last fence is still the latest, so
// the "latest" policy admits it and the "holder" policy does not.
func (s *suite) barrierPolicy(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "policy"
	a := acquire(t, st, key, time.Minute)
	mustRelease(t, st, a.LockID)

	r := admit(t, st, key, adm(t, a.Fence, true, time.Minute))
	wantRefused(t, "Admit(released fence, requireLive)", r, 0)
	if r.State.Live != nil || r.State.LatestFence != a.Fence {
		t.Errorf("State = live %s latest %q, want no live lock and latest %s", liveFence(r.State), r.State.LatestFence, a.Fence)
	}
	wantSameState(t, "refused Admit", r.State, inspect(t, st, key))
	wantAdmitted(t, "Admit(released fence, latest policy)", admit(t, st, key, adm(t, a.Fence, false, time.Minute)))
}

// barrierStaleUnknown: a fence that is not current — older, never issued,
// or on a key never locked — is refused with Blocking 0 and registers
// nothing that could block a later fence.
func (s *suite) barrierStaleUnknown(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "stale"
	a := acquire(t, st, key, time.Minute)
	b := handover(t, st, key, a)
	future := fence(t, fenceNum(t, b.Fence)+4)
	for _, live := range []bool{true, false} {
		wantRefused(t, fmt.Sprintf("Admit(stale fence, requireLive=%v)", live), admit(t, st, key, adm(t, a.Fence, live, time.Minute)), 0)
		wantRefused(t, fmt.Sprintf("Admit(never-issued fence, requireLive=%v)", live), admit(t, st, key, adm(t, future, live, time.Minute)), 0)
		r := admit(t, st, "never-locked", adm(t, fence(t, 1), live, time.Minute))
		wantRefused(t, fmt.Sprintf("Admit(key never locked, requireLive=%v)", live), r, 0)
		if r.State.Live != nil || r.State.LatestFence != "" {
			t.Errorf("Admit(key never locked): State = live %s latest %q, want empty", liveFence(r.State), r.State.LatestFence)
		}
	}
	// A registered stale entry would block the current fence now.
	cur := adm(t, b.Fence, true, time.Minute)
	wantAdmitted(t, "Admit(current fence) after refused stale admissions", admit(t, st, key, cur))
	finish(t, st, key, cur.WriteID)
	// A registered never-issued fence would block a fence issued later.
	last := b
	for fenceNum(t, last.Fence) <= fenceNum(t, future) {
		last = handover(t, st, key, last)
	}
	wantAdmitted(t, "Admit(fence issued after the refused never-issued one)", admit(t, st, key, adm(t, last.Fence, true, time.Minute)))
	// The key never locked got no fence from the refused admissions.
	if f := acquire(t, st, "never-locked", time.Minute).Fence; f != fence(t, 1) {
		t.Errorf("first fence of a key only ever admitted against = %s, want %s", f, fence(t, 1))
	}
}

// barrierFinishAbsent: Finish of an absent, already finished or foreign
// write id is not an error, and removes only its own entry.
func (s *suite) barrierFinishAbsent(t *caseT) {
	st, _ := s.freshConsecutive(t)
	const key = "finish"
	finish(t, st, "never-used", writeID(t))
	a := acquire(t, st, key, time.Minute)
	w := adm(t, a.Fence, true, time.Minute)
	wantAdmitted(t, "Admit", admit(t, st, key, w))
	finish(t, st, key, writeID(t))        // someone else's id
	finish(t, st, "other-key", w.WriteID) // right id, wrong key
	b := handover(t, st, key, a)
	wantRefused(t, "Admit(newer fence) after Finish of other ids", admit(t, st, key, adm(t, b.Fence, true, time.Minute)), 1)
	finish(t, st, key, w.WriteID)
	finish(t, st, key, w.WriteID) // twice: idempotent
	wantAdmitted(t, "Admit(newer fence) after Finish", admit(t, st, key, adm(t, b.Fence, true, time.Minute)))
}
