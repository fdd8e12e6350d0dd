package fencecheck

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/writeproof"
)

func proofSigner(t *testing.T, kid string, b byte) *writeproof.Signer {
	t.Helper()
	s, err := writeproof.NewSigner([]writeproof.Key{{KID: kid, Seed: bytes.Repeat([]byte{b}, ed25519.SeedSize)}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSign(t *testing.T, s *writeproof.Signer, key, fence, lockID string) string {
	t.Helper()
	p, err := s.Sign(key, fence, lockID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type proofCase struct {
	name   string
	state  lockstore.KeyState
	req    Request
	reason Reason
	reads  int32
}

func proofCases(t *testing.T, gw *writeproof.Signer) []proofCase {
	foreign := proofSigner(t, "k1", 9) // same kid, not the gateway's key
	good := mustSign(t, gw, "k", f5, idA)
	return []proofCase{
		{"none: fence alone passes", live(f5, idA), Request{Key: "k", Write: true, Fence: f5}, "", 1},
		{"signed: fence alone refused without a read", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned}, ReasonBadProof, 0},
		{"signed: genuine proof passes", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: good}, "", 1},
		{"signed: proof for another key", live(f5, idA), Request{Key: "k2", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: good}, ReasonBadProof, 0},
		{"signed: proof for another fence", live(f6, idA), Request{Key: "k", Write: true, Fence: f6, ProofMode: ProofSigned, Proof: good}, ReasonBadProof, 0},
		{"signed: older genuine proof and fence are stale", live(f6, idB), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: good}, ReasonStale, 1},
		{"signed: foreign key", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: mustSign(t, foreign, "k", f5, idA)}, ReasonBadProof, 0},
		{"signed: garbage", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: "v1.k1.x.y"}, ReasonBadProof, 0},
		{"signed: proof of another holder", live(f5, idB), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: good}, ReasonWrongOwner, 1},
		{"signed: missing fence is still 428", live(f5, idA), Request{Key: "k", Write: true, ProofMode: ProofSigned, Proof: good}, ReasonMissing, 0},
		{"signed: case-insensitive mode", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: "SIGNED"}, ReasonBadProof, 0},
		{"lockId: missing lockId refused without a read", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofLockID}, ReasonBadProof, 0},
		{"lockId: right lockId passes", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofLockID, LockID: idA}, "", 1},
		{"lockId: wrong lockId", live(f5, idA), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofLockID, LockID: idB}, ReasonWrongOwner, 1},
		{"signed: reads pass", live(f5, idA), Request{Key: "k", Write: false, ProofMode: ProofSigned}, "", 0},
	}
}

func runProofCases(t *testing.T, c func(*stateStore) *Checker, cases []proofCase, broken func(*Request)) (failed []string) {
	for _, tc := range cases {
		st := &stateStore{state: tc.state}
		req := tc.req
		if broken != nil {
			broken(&req)
		}
		d, err := c(st).Check(context.Background(), req)
		if err != nil || d.Reason != tc.reason || d.Allowed != (tc.reason == "") || d.Status != StatusOf(tc.reason) || st.reads.Load() != tc.reads {
			failed = append(failed, tc.name)
			if broken == nil {
				t.Errorf("%s: decision %+v (err %v, reads %d), want reason %q after %d reads", tc.name, d, err, st.reads.Load(), tc.reason, tc.reads)
			}
		}
	}
	return failed
}

func TestCheckProofModes(t *testing.T) {
	gw := proofSigner(t, "k1", 1)
	mk := func(st *stateStore) *Checker { return New(st, Options{Proofs: gw.Verifier()}) }
	runProofCases(t, mk, proofCases(t, gw), nil)

	// The same table against broken variants must fail: a checker that
	// ignores the route's proof mode, and one that takes any proof's word.
	for name, broken := range map[string]func(*Request){
		"proof mode ignored": func(r *Request) { r.ProofMode = "" },
		"proof unchecked":    func(r *Request) { r.ProofMode, r.Proof = "", "" },
	} {
		if failed := runProofCases(t, mk, proofCases(t, gw), broken); len(failed) == 0 {
			t.Errorf("broken variant %q passed the proof table", name)
		}
	}
}

func TestCheckSignedWithoutKeysFailsClosed(t *testing.T) {
	st := &stateStore{state: live(f5, idA)}
	d, err := New(st, Options{}).Check(context.Background(), Request{Key: "k", Write: true, Fence: f5, ProofMode: ProofSigned, Proof: "x"})
	if !errors.Is(err, errNoProofKeys) || d.Allowed || d.Status != 503 || st.reads.Load() != 0 {
		t.Fatalf("decision %+v, err %v", d, err)
	}
	d, err = New(st, Options{}).Check(context.Background(), Request{Key: "k", Write: true, Fence: f5, ProofMode: "bogus"})
	if err == nil || d.Allowed || d.Status != 503 {
		t.Fatalf("unknown proof mode: decision %+v, err %v", d, err)
	}
}

func TestParseProofMode(t *testing.T) {
	for in, want := range map[string]ProofMode{"": ProofNone, "none": ProofNone, "lockId": ProofLockID, "lock-id": ProofLockID, " Signed ": ProofSigned} {
		if got, err := ParseProofMode(in); err != nil || got != want {
			t.Errorf("ParseProofMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseProofMode("sign"); err == nil {
		t.Error("ParseProofMode(sign) accepted")
	}
}
