/*
 * fence.pml: a Promela model of fencegate's fence protocol for one key:
 * acquire with the clock floor and the lead cap, the store's clocks, a
 * failover to a lagging replica that loses recent writes, the edge check
 * under policy "latest", and the write barrier. doc.go and
 * docs/fence-model.md say more; go test ./lockstore/fencemodel runs it.
 *
 * Time is scaled down: one tick of the model stands for one tolerance
 * (TIME_TOLERANCE, 1000 ms), and the floor issues PER fences per tick,
 * so the lead cap keeps the design's relation "floor units per tolerance":
 *
 *   the design (floor-spec)                 the model
 *   floor(now) = (now-epoch) * FloorPerMs   FLOOR(now) = now * PER
 *   FloorLeadMax = tolerance * FloorPerMs   LEAD = TOL * PER
 *   FenceMax, checked first                 FMAX
 *
 * Assumptions, each a parameter or a guard below:
 *   A1 gap: after a failover that lost issued fences, the new primary
 *      issues nothing until GAP ticks (real time) after the last acquire
 *      on the lost primary.
 *   A2 skew: the two nodes' clocks differ by at most SKEW ticks, and
 *      neither steps back.
 *   A3 one primary at a time: the failover is one atomic step (no split
 *      brain).
 *   A4 quiet window: after a failover that lost issued fences, the edge
 *      admits no write until the first acquire on the new primary. The
 *      code does NOT do this; variant WINDOW drops it and breaks P2.
 *   A5 barrier entries survive a failover. The code does NOT ensure this
 *      (Admit does not wait for replicas); variant LOSE_ENTRIES drops it
 *      and breaks P3.
 *   A6 an entry is removed only by its write's finish: maxWrite is taken
 *      as longer than the modelled time. -DEXPIRY models expiry instead:
 *      an entry's deadline is the admitting node's clock + MW; the store
 *      drops it once its clock reaches that; a write ends (finish, or
 *      abandon, which leaves the entry) before the admitting clock does,
 *      as the proxy cuts it at maxWrite counted from before the check; a
 *      client whose entry lingers waits for it to expire before it
 *      acquires or writes again. With skew this breaks P3 (below).
 *   The lock's own liveness (TTL, release) is not modelled: any client
 *   may acquire at any time, which covers every expiry and release.
 *
 * The floor guarantee (P1) holds when
 *     GAP > SKEW + LEAD/PER    (= SKEW + TOL ticks)
 * because a lost fence is <= PER*(t_lost + off_old) + LEAD while the next
 * fence is >= PER*(t_new + off_new) >= PER*(t_lost + GAP + off_old - SKEW).
 * The defaults GAP 3, SKEW 1, TOL 1 are the smallest integers meeting it;
 * BIG_SKEW sets SKEW = GAP - TOL, the equality, and fails.
 *
 * Properties, assertions in the step that could break them:
 *   P1 no fence is ever issued twice for the key. An observer remembers
 *      one issued fence of the checker's choosing (watch) and every later
 *      acquire asserts it does not issue that fence again; the search
 *      tries every choice, so this finds any repeat.
 *   P2 admitted fences never go down: no write is admitted under a fence
 *      lower than one already admitted.
 *   P3 with the barrier on, no two writes are in flight at once under
 *      different fences.
 *   P4 no fence goes back: each issued fence exceeds every fence issued
 *      before it (the floor design's "no fence repeats or goes back";
 *      it implies P1, which is checked on its own as asked).
 *   -DCHECK=n keeps only the assertion of Pn (default: all four).
 *
 * Broken variants (spin -DNAME -a fence.pml); each must fail:
 *   NO_FLOOR      fence = counter+1 only                     -> P1, P4
 *   BIG_SKEW      SKEW = GAP - TOL, breaking the condition   -> P1, P4
 *   NO_LEAD_CAP   no lead cap: bursts run the counter ahead  -> P1, P4
 *   NO_BARRIER    the barrier's lower-fence rule removed     -> P3
 *   WINDOW        A4 dropped                                 -> P2
 *   LOSE_ENTRIES  A5 dropped: a failover loses the entries   -> P3
 *   EXPIRY        expiry with SKEW > 0: the new primary's clock runs
 *                 ahead and drops an entry before its write ends -> P3
 *                 (EXPIRY with SKEW=0 GAP=2 verifies)
 * Witnesses (-DREACH=n), each must "fail", which shows the correct model
 * reaches the situation, so its verdict is not vacuous:
 *   1 a write admitted after a failover that lost fences
 *   2 a current fence waiting for an older write (draining)
 *   3 an acquire refused by the lead cap
 *   4 (with EXPIRY) an entry expiring
 * -DNOSYM turns the client symmetry reduction off (readable trails).
 */

/* ---- parameters (override with -DNAME=value) ---- */
#ifndef PER
#define PER	2	/* floor units per tick (FloorPerMs, scaled) */
#endif
#ifndef TOL
#define TOL	1	/* the lead cap in ticks (TIME_TOLERANCE, scaled) */
#endif
#define LEAD	(TOL*PER)	/* FloorLeadMax: floor units per tolerance */
#ifndef GAP
#define GAP	3	/* A1: minimum failover gap, ticks */
#endif
#ifndef SKEW
#ifdef BIG_SKEW
#define SKEW	(GAP-TOL)	/* the smallest skew GAP > SKEW + TOL forbids */
#else
#define SKEW	1	/* A2: maximum clock skew between the nodes, ticks */
#endif
#endif
#ifndef TMAX
#define TMAX	5	/* last tick of real time modelled */
#endif
#ifndef FMAX
#define FMAX	24	/* the largest fence (FenceMax) */
#endif
#ifndef NFAIL
#define NFAIL	1	/* failovers at most */
#endif
#ifndef NC
#define NC	3	/* clients */
#endif
#ifndef MW
#define MW	2	/* maxWrite, ticks (only with EXPIRY) */
#endif

#define FLOOR(t)	((t)*PER)
#define NOW(n)	(rt + off[n])	/* node n's clock */

/* ---- the store: two nodes, one primary ---- */
byte rt;		/* real time, ticks */
byte off[2];		/* clock offsets: node n reads rt+off[n] */
byte cnt[2];		/* each node's copy of the key's fence counter (= latest fence) */
bit  p;			/* the primary */
byte nfail;		/* failovers so far */
byte lastIssue;		/* real time of the last acquire on the current primary */
byte earliest;		/* A1: no acquire before this real time */
bool window;		/* A4: lost fences, and no acquire on the new primary yet */
bool ent[NC];		/* the barrier's in-flight entries on the store, one per client */

#ifdef EXPIRY
byte dl[NC];		/* an entry's deadline, on the clock of the node that admitted it */
#endif

/* ---- clients ---- */
byte myf[NC];		/* the fence a client holds (0: none) */
bool busy[NC];		/* a write admitted and not finished */
#ifdef EXPIRY
byte wend[NC];		/* real time by which the write has ended (the proxy's maxWrite cut) */
#endif

byte f;			/* scratch of acquire, 0 between steps */
byte base;		/* scratch of canon, 0 between steps */

/* ---- history for the assertions ---- */
byte watch;		/* P1: one issued fence the checker chose to remember */
byte maxAdm;		/* P2: the highest fence admitted so far */
byte maxIss;		/* P4: the highest fence issued so far */
#ifdef REACH
bool lost;		/* witness 1: a failover lost issued fences */
#endif

#define SLOT(i)	(myf[i]*4 + busy[i]*2 + ent[i])

inline order(i, j)
{
	if
	:: SLOT(i) > SLOT(j) ->
		base = myf[i]; myf[i] = myf[j]; myf[j] = base;
		base = busy[i]; busy[i] = busy[j]; busy[j] = base;
		base = ent[i]; ent[i] = ent[j]; ent[j] = base;
#ifdef EXPIRY
		base = dl[i]; dl[i] = dl[j]; dl[j] = base;
		base = wend[i]; wend[i] = wend[j]; wend[j] = base;
#endif
		base = 0
	:: else -> skip
	fi
}

#ifdef EXPIRY
inline expire(i)
{
	if
	:: ent[i] && dl[i] <= NOW(p) ->
		ent[i] = false;
#if REACH == 4
		assert(false);	/* witness: an entry expires */
#endif
		skip
	:: else -> skip
	fi;
	if
	:: !ent[i] -> dl[i] = 0
	:: else -> skip
	fi;
	if
	:: !busy[i] -> wend[i] = 0
	:: else -> skip
	fi
}
#endif

/*
 * canon ends every step: it forgets what can no longer matter, so states
 * that differ only in it are stored once (this keeps the search small and
 * changes no verdict). base is a value every future counter is at least:
 * the replica's copy while a failover may still come (a failover reverts
 * the counter to it, replication only raises it), else the counter itself.
 * No fence <= base is ever issued again and only fences >= base can be
 * admitted, so a remembered fence or highest admitted fence <= base can
 * never fail an assertion, and the fence < base of a client with no write
 * and no entry can never be admitted: each is reset to 0 (the observer may then pick another fence).
 * Timing state that is already in the past is reset the same way.
 */
inline canon()
{
	if
	:: nfail < NFAIL -> base = cnt[1-p]
	:: else -> base = cnt[p]; cnt[1-p] = 0; lastIssue = 0
	fi;
	if
	:: watch <= base -> watch = 0
	:: else -> skip
	fi;
	if
	:: maxAdm <= base -> maxAdm = 0
	:: else -> skip
	fi;
	if
	:: maxIss <= base -> maxIss = 0
	:: else -> skip
	fi;
	if
	:: !busy[0] && !ent[0] && myf[0] < base -> myf[0] = 0
	:: else -> skip
	fi;
	if
	:: !busy[1] && !ent[1] && myf[1] < base -> myf[1] = 0
	:: else -> skip
	fi;
#if NC > 2
	if
	:: !busy[2] && !ent[2] && myf[2] < base -> myf[2] = 0
	:: else -> skip
	fi;
#endif
	if
	:: lastIssue + GAP <= rt -> lastIssue = 0
	:: else -> skip
	fi;
	if
	:: earliest <= rt -> earliest = 0
	:: else -> skip
	fi;
#ifdef EXPIRY
	/* the store drops entries whose deadline is not after its clock */
	expire(0);
	expire(1);
#if NC > 2
	expire(2);
#endif
#endif
	base = 0;
	/* symmetry: the clients are alike and stateless between steps, so
	   their slots are kept sorted (a sorting network on (fence, busy,
	   entry)); -DNOSYM keeps them in place, for readable trails */
#ifndef NOSYM
	order(0, 1);
#if NC > 2
	order(1, 2);
	order(0, 1);
#endif
#endif
	skip
}

/*
 * Acquire, in one atomic step on the primary: overflow first, then
 * fence = max(counter+1, floor(now)), refused (nothing written) when the
 * counter is more than LEAD ahead of the floor. A refused acquire changes
 * no state, so it is a step that is not enabled. The lock's own liveness
 * is not modelled: under policy latest only the counter matters, and
 * letting any client acquire at any time covers every expiry and release.
 */
inline acquire(me, remember)
{
	d_step {
		(!busy[me] && !ent[me] && rt >= earliest && cnt[p] < FMAX && (!remember || watch == 0)
#ifndef NO_FLOOR
		&& FLOOR(NOW(p)) <= FMAX

#ifndef NO_LEAD_CAP
		&& cnt[p] + 1 <= FLOOR(NOW(p)) + LEAD
#endif
#endif
		);
#ifdef NO_FLOOR
		f = cnt[p] + 1;
#else
		if
		:: cnt[p] + 1 >= FLOOR(NOW(p)) -> f = cnt[p] + 1
		:: else -> f = FLOOR(NOW(p))
		fi;
#endif
#if !defined(CHECK) || CHECK == 1
		assert(f != watch);	/* P1 */
#endif
#if !defined(CHECK) || CHECK == 4
		assert(f > maxIss);	/* P4 */
#endif
		maxIss = f;
		printf("MSC: t=%d acquire: client %d gets fence %d (node %d, clock %d, floor %d)\n", rt, me, f, p, NOW(p), FLOOR(NOW(p)));
		cnt[p] = f;
		lastIssue = rt;
		window = false;
		myf[me] = f;
		if
		:: remember -> watch = f
		:: else -> skip
		fi;
		f = 0;
		canon()
	}
}

/*
 * The edge check with the write barrier, one atomic Admit on the primary:
 * admitted iff the presented fence is the key's latest (policy latest)
 * and no entry under a lower fence is in flight; admission registers the
 * client's entry.
 */
inline admit(me)
{
	d_step {
		(myf[me] != 0 && !busy[me] && !ent[me] && myf[me] == cnt[p]
#ifndef WINDOW
		&& !window
#endif
#ifndef NO_BARRIER
		&& !((ent[0] && myf[0] < myf[me]) || (ent[1] && myf[1] < myf[me])
#if NC > 2
		     || (ent[2] && myf[2] < myf[me])
#endif
		    )
#endif
		);
		printf("MSC: t=%d admit: client %d writes under fence %d\n", rt, me, myf[me]);
#if !defined(CHECK) || CHECK == 2
		assert(myf[me] >= maxAdm);	/* P2 */
#endif
		maxAdm = myf[me];
#if !defined(CHECK) || CHECK == 3
		assert((!busy[0] || myf[0] == myf[me]) && (!busy[1] || myf[1] == myf[me])	/* P3 */
#if NC > 2
		       && (!busy[2] || myf[2] == myf[me])
#endif
		      );
#endif
		ent[me] = true;
		busy[me] = true;
#ifdef EXPIRY
		dl[me] = NOW(p) + MW;
		wend[me] = rt + MW;
#endif
#if REACH == 1
		assert(!lost);	/* witness: a write admitted after a lossy failover */
#endif
		canon()
	}
}

/* The write's response is complete: its entry is removed. */
inline finish(me)
{
	d_step {
		busy[me];
		printf("MSC: t=%d finish: client %d's write under fence %d\n", rt, me, myf[me]);
		busy[me] = false;
		ent[me] = false;
		canon()
	}
}

#ifdef EXPIRY
/* The write's exchange failed: the edge cannot tell whether the API
   committed, so it leaves the entry to expire (Abandon). */
inline abandon(me)
{
	d_step {
		(busy[me] && ent[me]);
		printf("MSC: t=%d abandon: client %d's write under fence %d\n", rt, me, myf[me]);
		busy[me] = false;
		canon()
	}
}
#endif

proctype client(byte me)
{
end:	/* a client may stop anywhere */
	do
	:: acquire(me, false)
	:: acquire(me, true)	/* and P1's observer remembers the fence */
	:: admit(me)
	:: finish(me)
#ifdef EXPIRY
	:: abandon(me)
#endif
#if REACH == 2
	/* witness: a current fence waits for an older write (draining) */
	:: d_step {
		(myf[me] != 0 && !busy[me] && myf[me] == cnt[p] && !window &&
		 ((ent[0] && myf[0] < myf[me]) || (ent[1] && myf[1] < myf[me])
#if NC > 2
		  || (ent[2] && myf[2] < myf[me])
#endif
		 )) -> assert(false)
	   }
#endif
#if REACH == 3
	/* witness: the lead cap refuses an acquire */
	:: d_step {
		(!busy[me] && rt >= earliest && cnt[p] < FMAX &&
		 cnt[p] + 1 > FLOOR(NOW(p)) + LEAD) -> assert(false)
	   }
#endif
	od
}

/* Time, replication and failover. */
proctype store()
{
end:	/* time is bounded: the run stops at TMAX */
	do
	:: d_step {
		(rt < TMAX
#ifdef EXPIRY
		/* a write ends before the clock that admitted it reaches its
		   entry's deadline: the proxy cuts it at maxWrite counted from
		   before the check */
		 && (!busy[0] || wend[0] > rt + 1) && (!busy[1] || wend[1] > rt + 1)
#if NC > 2
		 && (!busy[2] || wend[2] > rt + 1)
#endif
#endif
		) ->
		rt++;
		printf("MSC: t=%d\n", rt);
		canon()
	   }
	/* the replica catches up with the primary (any older value is
	   therefore possible for its copy at the failover) */
	:: d_step {
		nfail < NFAIL && cnt[1-p] != cnt[p] ->
		cnt[1-p] = cnt[p];
		printf("MSC: t=%d replica has counter %d\n", rt, cnt[1-p]);
		canon()
	   }
	/* failover: the replica is promoted with its (possibly older) counter;
	   the old primary comes back as a replica of it */
	:: d_step {
		nfail < NFAIL ->
		nfail++;
		printf("MSC: t=%d failover: node %d (counter %d, clock %d) promoted, node %d (counter %d, clock %d) lost\n", rt, 1-p, cnt[1-p], NOW(1-p), p, cnt[p], NOW(p));
		if
		:: cnt[1-p] < cnt[p] ->	/* issued fences are lost */
			earliest = lastIssue + GAP;	/* A1 */
			printf("MSC: fences %d..%d lost; no acquire before t=%d\n", cnt[1-p]+1, cnt[p], earliest);
			window = true;	/* A4 */
#ifdef REACH
			lost = true;
#endif
			skip
		:: else -> skip
		fi;
		p = 1 - p;
		cnt[1-p] = cnt[p];
#ifdef LOSE_ENTRIES
		ent[0] = false; ent[1] = false;
#if NC > 2
		ent[2] = false;
#endif
#endif
		canon()
	   }
	od
}

init
{
	atomic {
		/* A2: node 0 reads rt+SKEW, node 1 anything within SKEW of it */
		off[0] = SKEW;
		select(f : 0 .. 2*SKEW);
		off[1] = f;
		f = 0;
		run store();
		run client(0);
		run client(1);
#if NC > 2
		run client(2);
#endif
	}
}
