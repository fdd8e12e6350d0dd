package backend

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fencegate/fencegate/lockstore"
)

// FenceOverflow is the error of an acquire of key whose fence counter is
// already at FenceMax: Internal, because nothing the caller sent was wrong.
// Every backend returns it, and writes nothing, in that case.
func FenceOverflow(op, key string) *lockstore.Error {
	return &lockstore.Error{Code: lockstore.Internal, Op: op, Key: key,
		Msg: fmt.Sprintf("fence counter overflow: the key's counter is at FenceMax (%d) and nothing was written; rotate the key namespace", lockstore.FenceMax)}
}

// NoteFence is what every backend does with a fence it has just issued for
// key: past FenceWarn it logs one warning (the key's hash, never the key),
// so operators have years to rotate the key namespace before FenceOverflow.
// Call it once per issued fence, after the write has committed, never from
// inside a transaction body that may run again.
func NoteFence(ctx context.Context, log *slog.Logger, key string, n int64) {
	if !lockstore.FenceNeedsWarning(n) {
		return
	}
	f := fmt.Sprintf("%0*d", lockstore.FenceDigits, n)
	log.WarnContext(ctx, "fence counter past the warning level; plan a key namespace rotation",
		"keyHash", lockstore.HashKey(key), "fence", f, "fenceWarn", lockstore.FenceWarn, "fenceMax", lockstore.FenceMax)
}
