package bolt

import (
	"encoding/binary"
	"encoding/json"

	"github.com/fencegate/fencegate/lockstore"
)

// lockRecord is a lock as held in memory. Key is always the locks bucket
// key the record was found under, never a copy stored in the value.
type lockRecord struct {
	LockID       string
	ExpiresAtMs  int64
	AcquiredAtMs int64
	Key          string
	Fence        string
}

// jsonRecord is the JSON record format. Every field is required: a
// missing expiresAtMs must not read as 0 (expired, free to take).
type jsonRecord struct {
	LockID       *string `json:"lockId"`
	ExpiresAtMs  *int64  `json:"expiresAtMs"`
	AcquiredAtMs *int64  `json:"acquiredAtMs"`
	Key          *string `json:"key"`
	Fence        *string `json:"fence"`
}

func (r *lockRecord) info() *lockstore.LockInfo {
	return lockstore.Lock{Key: r.Key, LockID: r.LockID, Fence: r.Fence, ExpiresAtMs: r.ExpiresAtMs, AcquiredAtMs: r.AcquiredAtMs}.Info()
}

// A lock record's value in the locks bucket comes in one of two formats,
// told apart by its first byte.
//
// '{' (0x7b) starts a JSON record in SyncGuard's lock value layout,
// {"lockId":…,"expiresAtMs":…,"acquiredAtMs":…,"key":…,"fence":"…"}.
// Every record written before the binary format was one; files holding
// them are read, extended and released as they are, forever. A JSON
// record becomes binary only when a mutation rewrites it anyway (extend).
// A store opened with Config.Records = RecordsJSON (records=json) writes
// only JSON records, and first converts the file's binary ones
// (convertToJSON), so that an older fencegate can take the file over.
//
// recordV1 (0x01) starts the binary record a write produces by default:
// 47 bytes, integers big-endian so that a hex dump (bbolt get --format hex)
// reads left to right:
//
//	offset size field
//	0      1    format: 0x01
//	1      8    expiresAtMs, int64 Unix ms
//	9      8    acquiredAtMs, int64 Unix ms
//	17     8    fence, uint64 in [1, lockstore.FenceMax] (the 15-digit fence)
//	25     22   lockId, its base64url characters (as in lock_ids)
//
// The key is not repeated: it is the bucket key. A JSON record was ~150
// bytes plus the key once more, which with bbolt's 16-byte element header
// and half-full pages was most of a held lock's share of the file.
//
// Any other first byte, or a binary record of another length, is a
// corrupt (or newer-than-this-binary) record: an Internal error, so that
// key fails closed instead of reading as free.
const (
	recordJSON     = '{'
	recordV1       = 0x01
	recordV1Length = 1 + 8 + 8 + 8 + lockstore.LockIDLength
)

// encodeRecord renders r in the binary format. r.Fence must be a valid
// 15-digit fence (every caller got it from backend.NextFenceAt or from a
// decoded record).
func encodeRecord(r *lockRecord) ([]byte, error) {
	fence, err := checkEncodable(r)
	if err != nil {
		return nil, err
	}
	v := make([]byte, 0, recordV1Length)
	v = append(v, recordV1)
	v = binary.BigEndian.AppendUint64(v, uint64(r.ExpiresAtMs))
	v = binary.BigEndian.AppendUint64(v, uint64(r.AcquiredAtMs))
	v = binary.BigEndian.AppendUint64(v, uint64(fence))
	return append(v, r.LockID...), nil
}

// encodeJSONRecord renders r as a JSON record exactly as every fencegate
// before the binary record wrote it (encoding/json on a struct of these
// fields in this order, key included), so that those versions read it:
// they decode it with encoding/json and trust every field.
func encodeJSONRecord(r *lockRecord) ([]byte, error) {
	if _, err := checkEncodable(r); err != nil {
		return nil, err
	}
	// jsonRecord's fields are pointers (so decoding can tell a missing
	// field); encoding/json writes a pointer as its value.
	v, err := json.Marshal(jsonRecord{&r.LockID, &r.ExpiresAtMs, &r.AcquiredAtMs, &r.Key, &r.Fence})
	if err != nil {
		return nil, lockstore.Errorf(lockstore.Internal, "encode", "bolt: lock record: %v", err)
	}
	return v, nil
}

// checkEncodable refuses to write a record decodeRecord would reject: a
// fence that is not 15 valid digits or a lockId of the wrong length.
func checkEncodable(r *lockRecord) (int64, error) {
	fence, err := lockstore.ParseFence(r.Fence)
	if err != nil {
		return 0, lockstore.Errorf(lockstore.Internal, "encode", "bolt: lock record fence: %v", err)
	}
	if len(r.LockID) != lockstore.LockIDLength {
		return 0, lockstore.Errorf(lockstore.Internal, "encode", "bolt: lock record lockId is %d bytes", len(r.LockID))
	}
	return fence, nil
}

// decodeRecord reads the record stored under bucket key k in either
// format and checks it: a valid lockId and fence, and for JSON records a
// key field equal to k. Anything else is a corrupt record (Internal).
func decodeRecord(k string, v []byte) (*lockRecord, error) {
	if len(v) == 0 {
		return nil, corrupt("empty value")
	}
	var r lockRecord
	switch v[0] {
	case recordV1:
		if len(v) != recordV1Length {
			return nil, corrupt("binary record of %d bytes, want %d", len(v), recordV1Length)
		}
		r.ExpiresAtMs = int64(binary.BigEndian.Uint64(v[1:9]))
		r.AcquiredAtMs = int64(binary.BigEndian.Uint64(v[9:17]))
		// A counter past int64 reads negative: FormatFence refuses it too.
		fence := binary.BigEndian.Uint64(v[17:25])
		f, err := lockstore.FormatFence(int64(fence))
		if err != nil {
			return nil, corrupt("fence %d out of range", fence)
		}
		r.Fence = f
		r.LockID = string(v[25:])
	case recordJSON:
		var j jsonRecord
		if err := json.Unmarshal(v, &j); err != nil {
			return nil, corrupt("%v", err)
		}
		if j.LockID == nil || j.ExpiresAtMs == nil || j.AcquiredAtMs == nil || j.Key == nil || j.Fence == nil {
			return nil, corrupt("JSON record lacks a field")
		}
		if *j.Key != k {
			return nil, corrupt("JSON record's key field differs from its bucket key")
		}
		if _, err := lockstore.ParseFence(*j.Fence); err != nil {
			return nil, corrupt("fence: %v", err)
		}
		r = lockRecord{LockID: *j.LockID, ExpiresAtMs: *j.ExpiresAtMs, AcquiredAtMs: *j.AcquiredAtMs, Fence: *j.Fence}
	default:
		return nil, corrupt("unknown record format 0x%02x (written by a newer fencegate?)", v[0])
	}
	if err := lockstore.ValidateLockID(r.LockID); err != nil {
		return nil, corrupt("lockId: %v", err)
	}
	r.Key = k
	return &r, nil
}

func corrupt(format string, args ...any) error {
	return lockstore.Errorf(lockstore.Internal, "decode", "bolt: corrupt lock record: "+format, args...)
}
