// Package fencemodel holds fence.pml, a Promela model of the fence
// protocol of one key, and the test that model-checks it with Spin. It
// has no Go API.
//
// The model encodes: acquire as one atomic step on the primary store
// (overflow first, then fence = max(counter+1, floor(now)), refused when
// the counter is more than the lead cap ahead of the floor; the clock
// floor of the floor-spec design); two store nodes with their own clocks,
// skewed by a bounded amount; replication that leaves the replica with
// some older copy of the counter; a failover that promotes the replica,
// losing the fences issued after that copy; the edge check under policy
// latest (a write is admitted iff its fence is the key's latest fence as
// the primary sees it now); and the write barrier (admission registers an
// entry, a write under a higher fence is not admitted while an entry under
// a lower one is unfinished, finish removes it).
//
// Time is scaled down: a tick is one tolerance (TIME_TOLERANCE), the floor
// issues PER=2 fences per tick and the lead cap is TOL*PER = 2 (floor
// units per tolerance, as FloorLeadMax = 1000 ms × FloorPerMs).
//
// Properties: P1 no fence is issued twice; P2 admitted fences never go
// down; P3 with the barrier, no two writes under different fences are in
// flight at once; P4 no issued fence goes back (below an earlier one). They hold under these assumptions (fence.pml's header
// has them in full):
//
//   - A1: after a failover that lost fences, the new primary issues
//     nothing for GAP ticks after the last acquire on the lost one;
//   - A2: the nodes' clocks differ by at most SKEW and never step back;
//   - A3: one primary at a time (the failover is atomic);
//   - A4: after a failover that lost fences the edge admits nothing until
//     the first acquire on the new primary (the code does not do this);
//   - A5: barrier entries survive a failover (the code does not ensure it);
//   - A6: entries leave only by finish; -DEXPIRY models their expiry at
//     maxWrite instead, which holds P3 only without clock skew.
//
// P1 needs GAP > SKEW + LEAD/PER (in ticks); the defaults GAP=3, SKEW=1,
// TOL=1 are the smallest that satisfy it.
//
// The test runs the correct model (complete search, no error), each
// broken variant (NO_FLOOR, BIG_SKEW, NO_LEAD_CAP, NO_BARRIER, WINDOW,
// LOSE_ENTRIES, EXPIRY: each must fail the property it breaks) and four
// witnesses (REACH=1..4) that show the correct model reaches a write after
// a lossy failover, a draining barrier, a refused acquire and an expiring
// entry. It fails when spin or gcc is missing (apt-get install spin gcc).
//
// By hand, in a scratch directory:
//
//	spin -a fence.pml                 # or spin -DNO_FLOOR -DCHECK=1 -a fence.pml, ...
//	gcc -O2 -DSAFETY -o pan pan.c     # add -DBFS for shortest counterexamples
//	./pan -m10000                     # "errors: 0" and no "Search not completed"
//	spin -t -DNO_FLOOR -DCHECK=1 fence.pml  # replay a counterexample (same -D flags)
//
// docs/fence-model.md has the results and the counterexamples.
package fencemodel
