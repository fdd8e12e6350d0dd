package bolt

import (
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
)

// DefaultOpenTimeout is how long Open waits for the file lock before it
// reports the file as in use. Long enough to ride out a restarting
// predecessor releasing it, short enough that a misconfigured second
// process fails at once instead of hanging.
const DefaultOpenTimeout = time.Second

// Config configures the embedded store.
type Config struct {
	// Path is the database file. It is created (with its directory) if
	// missing.
	Path string
	// Logger receives warnings (fence counters past FenceWarn, pruning
	// failures). Nil means slog.Default().
	Logger *slog.Logger
	// AuditRetention bounds the audit events kept in the file; zero fields
	// take lockstore's defaults.
	AuditRetention lockstore.AuditRetention
	// OpenTimeout bounds the wait for the file lock; zero means
	// DefaultOpenTimeout.
	OpenTimeout time.Duration
	// Records is the lock record format this store writes: RecordsBinary
	// (the default, also for "") or RecordsJSON, the format fencegate
	// versions before the binary record wrote and read. With RecordsJSON,
	// Open first rewrites every binary record in the file as JSON, so that
	// an older fencegate can run on the file afterwards (a rollback).
	// Both formats are always read.
	Records RecordFormat
	// FenceFloor picks the next fence: the zero value, FloorClock, keeps
	// fences growing with the gateway's clock so that a file restored from
	// a backup cannot reissue one (backend.FloorLeadMax); FloorOff
	// issues consecutive fences and can.
	FenceFloor backend.FenceFloor
}

// RecordFormat names a lock record format (record.go).
type RecordFormat string

// The lock record formats a store can write.
const (
	// RecordsBinary writes the 47-byte binary record (the default).
	RecordsBinary RecordFormat = "binary"
	// RecordsJSON writes SyncGuard's JSON lock value, key included, byte
	// for byte as fencegate versions before the binary record did, and
	// converts the file's binary records to it when the store opens.
	RecordsJSON RecordFormat = "json"
)

// recordsParam is the store URL parameter that sets Config.Records.
const recordsParam = "records"

// check reports a format this package does not know as InvalidArgument,
// naming the allowed ones.
func (f RecordFormat) check() error {
	switch f {
	case "", RecordsBinary, RecordsJSON:
		return nil
	}
	return lockstore.Errorf(lockstore.InvalidArgument, "config",
		"bolt: %s=%q is not a lock record format; allowed: %s (default), %s", recordsParam, string(f), RecordsBinary, RecordsJSON)
}

// ParseURL parses a bolt store URL: bolt:///abs/path.db for an absolute
// path, or bolt://./rel.db for a path relative to the working directory
// (resolved to an absolute path now, so a later chdir changes nothing).
// The query parameters are records=binary|json (Config.Records) and
// fenceFloor=clock|off (Config.FenceFloor), each at most once.
func ParseURL(u string) (Config, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return Config{}, fmt.Errorf("bolt: parse store URL: %w", err)
	}
	if pu.Scheme != "bolt" {
		return Config{}, fmt.Errorf("bolt: store URL scheme is %q, want bolt:///abs/path.db or bolt://./rel.db", pu.Scheme)
	}
	if pu.User != nil || pu.Port() != "" {
		return Config{}, fmt.Errorf("bolt: store URL names a local file and takes no user or port; want bolt:///abs/path.db or bolt://./rel.db")
	}
	if pu.Fragment != "" {
		return Config{}, fmt.Errorf("bolt: store URL takes no fragment; want bolt:///abs/path.db or bolt://./rel.db")
	}
	cfg, err := parseQuery(pu.RawQuery)
	if err != nil {
		return Config{}, err
	}
	if pu.Opaque != "" {
		return Config{}, fmt.Errorf("bolt: store URL %q is not of the form bolt:///abs/path.db or bolt://./rel.db", u)
	}
	var p string
	switch pu.Host {
	case "":
		p = pu.Path // "/abs/path.db"
	case ".":
		if pu.Path == "" || pu.Path == "/" {
			return Config{}, fmt.Errorf("bolt: store URL %q names no file; want bolt://./rel.db", u)
		}
		abs, err := filepath.Abs("." + pu.Path)
		if err != nil {
			return Config{}, fmt.Errorf("bolt: resolve relative path: %w", err)
		}
		p = abs
	default:
		return Config{}, fmt.Errorf("bolt: store URL has host %q; bolt stores are local files: use bolt:///abs/path.db or bolt://./rel.db", pu.Host)
	}
	if p == "" || strings.HasSuffix(p, "/") {
		return Config{}, fmt.Errorf("bolt: store URL %q names no file; want bolt:///abs/path.db or bolt://./rel.db", u)
	}
	cfg.Path = filepath.Clean(p)
	return cfg, nil
}

// parseQuery reads the store URL's query: records and fenceFloor, each at
// most once.
func parseQuery(raw string) (Config, error) {
	var cfg Config
	if raw == "" {
		return cfg, nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return cfg, lockstore.Errorf(lockstore.InvalidArgument, "config", "bolt: store URL query: %v", err)
	}
	for name, vals := range q {
		if name != recordsParam && name != backend.FenceFloorParam {
			return cfg, lockstore.Errorf(lockstore.InvalidArgument, "config",
				"bolt: unknown store URL parameter %q; the parameters are %s=%s|%s and %s=clock|off",
				name, recordsParam, RecordsBinary, RecordsJSON, backend.FenceFloorParam)
		}
		if len(vals) != 1 {
			return cfg, lockstore.Errorf(lockstore.InvalidArgument, "config", "bolt: store URL parameter %s given %d times", name, len(vals))
		}
		if name == backend.FenceFloorParam {
			if cfg.FenceFloor, err = backend.ParseFenceFloor(vals[0]); err != nil {
				return cfg, err
			}
			continue
		}
		cfg.Records = RecordFormat(vals[0])
		if cfg.Records == "" {
			return cfg, lockstore.Errorf(lockstore.InvalidArgument, "config",
				"bolt: %s= is empty; allowed: %s (default), %s", recordsParam, RecordsBinary, RecordsJSON)
		}
		if err := cfg.Records.check(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
