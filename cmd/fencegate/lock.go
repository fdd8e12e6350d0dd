package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencegate/fencegate/lock"
	"github.com/fencegate/fencegate/lockstore"
)

const lockUsage = `usage: fencegate lock <subcommand> [flags]

  acquire --key K [--ttl 30s] [--wait 0s]   take a lock; prints {"ok","lockId","fence","expiresAtMs"[,"proof"]}
  release --lock-id ID                      release it; prints {"ok"}
  extend  --lock-id ID [--ttl 30s]          reset its expiry to now+ttl; prints {"ok","expiresAtMs"}
  status  --key K                           prints {"locked"}
  lookup  --key K | --lock-id ID            prints the sanitised lock, or {} when absent
  run     --key K [--ttl 30s] [--wait 0s] -- CMD ARGS...
                                            run CMD holding the lock (see 'fencegate lock run -h')
  annotate [--key K --fence F] [--patch]    stamp a Kubernetes object (stdin) with the fence
                                            annotations the admission webhook checks

Every subcommand takes --server (env FENCEGATE_SERVER), --token-file or env FENCEGATE_TOKEN.
The lock id can also come from env FENCE_LOCK_ID (so it stays off the command line).
Exit codes: 0 ok; 1 the answer is no (locked, not found); 2 usage; 3 failure (gateway or store).`

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, lockUsage)
		return exitUsage
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, lockUsage)
		return exitOK
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "run":
		return runLockRun(ctx, args, stdout, stderr)
	case "annotate":
		return runAnnotate(args, os.Stdin, stdout, stderr)
	}
	uses, known := lockSubFlags[sub]
	if !known {
		fmt.Fprintf(stderr, "fencegate lock: unknown subcommand %q\n\n%s\n", sub, lockUsage)
		return exitUsage
	}
	// Each subcommand declares only the flags it reads, so its -h lists
	// exactly those and a flag it would ignore is refused.
	fs := newFlagSet("lock "+sub, "usage: fencegate lock "+uses.usage)
	var cf clientFlags
	cf.register(fs)
	var key, lockID string
	ttl, wait := lockstore.DefaultTTL, time.Duration(0)
	if uses.key {
		fs.StringVar(&key, "key", "", "lock key")
	}
	if uses.lockID {
		fs.StringVar(&lockID, "lock-id", envOr("FENCE_LOCK_ID", ""), "lock id (env FENCE_LOCK_ID)")
	}
	if uses.ttl {
		fs.DurationVar(&ttl, "ttl", lockstore.DefaultTTL, "lock TTL")
	}
	if uses.wait {
		fs.DurationVar(&wait, "wait", 0, "how long the gateway retries while the key is held")
	}
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencegate lock %s: unexpected argument %q\n", sub, fs.Arg(0))
		return exitUsage
	}
	return lockOp(ctx, sub, &cf, &key, &lockID, &ttl, &wait, stdout, stderr)
}

// lockSubFlags is which flags each of lock's store subcommands reads.
var lockSubFlags = map[string]struct {
	usage                  string
	key, lockID, ttl, wait bool
}{
	"acquire": {usage: "acquire --key K [--ttl 30s] [--wait 0s]", key: true, ttl: true, wait: true},
	"release": {usage: "release --lock-id ID", lockID: true},
	"extend":  {usage: "extend --lock-id ID [--ttl 30s]", lockID: true, ttl: true},
	"status":  {usage: "status --key K", key: true},
	"lookup":  {usage: "lookup --key K | --lock-id ID", key: true, lockID: true},
}

// lockOp runs one of lock's store subcommands.
func lockOp(ctx context.Context, sub string, cf *clientFlags, key, lockID *string, ttl, wait *time.Duration, stdout, stderr io.Writer) int {
	c, err := cf.client()
	if err != nil {
		fmt.Fprintln(stderr, "fencegate lock:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout+*wait)
	defer cancel()

	need := func(name, v string) bool {
		if v == "" {
			fmt.Fprintf(stderr, "fencegate lock %s: --%s is required\n", sub, name)
			return false
		}
		return true
	}
	switch sub {
	case "acquire":
		if !need("key", *key) {
			return exitUsage
		}
		r, err := c.AcquireWait(ctx, *key, *ttl, *wait)
		if err != nil {
			return fail(stderr, "acquire", err)
		}
		if !r.OK {
			printJSON(stdout, map[string]any{"ok": false, "reason": r.Reason})
			return exitNo
		}
		out := map[string]any{"ok": true, "lockId": r.LockID, "fence": r.Fence, "expiresAtMs": r.ExpiresAtMs}
		if r.Proof != "" {
			out["proof"] = r.Proof
		}
		printJSON(stdout, out)
	case "release":
		if !need("lock-id", *lockID) {
			return exitUsage
		}
		r, err := c.Release(ctx, *lockID)
		if err != nil {
			return fail(stderr, "release", err)
		}
		printJSON(stdout, map[string]any{"ok": r.OK})
		if !r.OK {
			return exitNo
		}
	case "extend":
		if !need("lock-id", *lockID) {
			return exitUsage
		}
		r, err := c.Extend(ctx, *lockID, *ttl)
		if err != nil {
			return fail(stderr, "extend", err)
		}
		if !r.OK {
			printJSON(stdout, map[string]any{"ok": false})
			return exitNo
		}
		printJSON(stdout, map[string]any{"ok": true, "expiresAtMs": r.ExpiresAtMs})
	case "status":
		if !need("key", *key) {
			return exitUsage
		}
		locked, err := c.IsLocked(ctx, *key)
		if err != nil {
			return fail(stderr, "status", err)
		}
		printJSON(stdout, map[string]any{"locked": locked})
	case "lookup":
		if (*key == "") == (*lockID == "") {
			fmt.Fprintln(stderr, "fencegate lock lookup: give exactly one of --key and --lock-id")
			return exitUsage
		}
		var info *lockstore.LockInfo
		if *key != "" {
			info, err = c.LookupKey(ctx, *key)
		} else {
			info, err = c.LookupLockID(ctx, *lockID)
		}
		if err != nil {
			return fail(stderr, "lookup", err)
		}
		if info == nil {
			printJSON(stdout, map[string]any{})
			return exitNo
		}
		printJSON(stdout, info)
	default:
		fmt.Fprintf(stderr, "fencegate lock: unknown subcommand %q\n\n%s\n", sub, lockUsage)
		return exitUsage
	}
	return exitOK
}

// fail prints err and maps it to an exit code: the caller's mistakes are
// usage errors, everything else a failure.
func fail(stderr io.Writer, op string, err error) int {
	fmt.Fprintf(stderr, "fencegate lock %s: %v\n", op, err)
	switch lockstore.CodeOf(err) {
	case lockstore.InvalidArgument:
		return exitUsage
	case lockstore.Aborted:
		return exitCanceled
	}
	return exitFailure
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// errLockBusy is returned by acquireWaiting when the key stayed held.
var errLockBusy = errors.New("lock is held by another holder")

// acquireWaiting takes the lock, asking the gateway to wait up to wait for
// it. A wait longer than the gateway's cap is covered by repeated calls.
func acquireWaiting(ctx context.Context, c interface {
	AcquireWait(context.Context, string, time.Duration, time.Duration) (lock.Acquired, error)
}, key string, ttl, wait time.Duration) (lock.Acquired, time.Time, error) {
	const perCall = 20 * time.Second // under any sane gateway maxWait
	deadline := time.Now().Add(wait)
	for {
		w := min(time.Until(deadline), perCall)
		if w < 0 {
			w = 0
		}
		sent := time.Now()
		r, err := c.AcquireWait(ctx, key, ttl, w)
		if err != nil || r.OK {
			return r, sent, err
		}
		if time.Until(deadline) <= 0 {
			return r, sent, errLockBusy
		}
	}
}
