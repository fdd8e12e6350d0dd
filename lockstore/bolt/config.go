package bolt

import (
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockstore"
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
}

// ParseURL parses a bolt store URL: bolt:///abs/path.db for an absolute
// path, or bolt://./rel.db for a path relative to the working directory
// (resolved to an absolute path now, so a later chdir changes nothing).
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
	if pu.RawQuery != "" || pu.Fragment != "" {
		return Config{}, fmt.Errorf("bolt: store URL takes no query or fragment; want bolt:///abs/path.db or bolt://./rel.db")
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
	return Config{Path: filepath.Clean(p)}, nil
}
