package bolt

import (
	"context"
	"fmt"
	"log/slog"

	bbolt "go.etcd.io/bbolt"
)

// conversion is what a store opened with RecordsJSON found and did in the
// locks bucket (convertToJSON).
type conversion struct {
	converted   int // binary records rewritten as JSON
	alreadyJSON int // JSON records, left byte for byte as they were
	undecodable int // records neither format reads, left as they were
}

// convertToJSON rewrites, inside tx, every binary lock record as the JSON
// record of the same lock (encode: encodeJSONRecord), so that a fencegate from
// before the binary record, which decodes every record it meets as JSON,
// can run on the file. Held and expired records alike: the old version
// must see an expired lock as expired to reclaim it, and ListHeld there
// fails on any record it cannot decode.
//
// A record that does not decode is left as it is and counted: it fails
// closed (Internal) for its key in this version and in older ones alike,
// and refusing to open would turn one bad key into a down gateway.
func convertToJSON(tx *bbolt.Tx, encode func(*lockRecord) ([]byte, error)) (conversion, error) {
	var c conversion
	type rewrite struct{ k, v []byte }
	var rewrites []rewrite
	b := tx.Bucket(bucketLocks)
	// Collect first, write after: a cursor must not walk a bucket that is
	// being written.
	err := b.ForEach(func(k, v []byte) error {
		if len(v) > 0 && v[0] == recordJSON {
			c.alreadyJSON++
			return nil
		}
		r, err := decodeRecord(string(k), v)
		if err != nil {
			c.undecodable++
			return nil // left in place on purpose, see above
		}
		j, err := encode(r)
		if err != nil {
			return err
		}
		rewrites = append(rewrites, rewrite{append([]byte(nil), k...), j})
		return nil
	})
	if err != nil {
		return c, err
	}
	for _, w := range rewrites {
		if err := b.Put(w.k, w.v); err != nil {
			return c, fmt.Errorf("rewrite lock record: %w", err)
		}
	}
	c.converted = len(rewrites)
	return c, nil
}

// logConversion reports, once per Open, what convertToJSON did: counts
// only, never a key or lockId.
func logConversion(ctx context.Context, log *slog.Logger, path string, c conversion) {
	level := slog.LevelInfo
	msg := "bolt: lock records are in the JSON format older fencegate versions read (records=json)"
	if c.undecodable > 0 {
		level = slog.LevelWarn
		msg += "; undecodable records were left as they were and fail closed for their keys in every version"
	}
	log.Log(ctx, level, msg, "path", path,
		"converted", c.converted, "already_json", c.alreadyJSON, "undecodable", c.undecodable)
}
