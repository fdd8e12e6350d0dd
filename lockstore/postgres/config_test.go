package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

func TestValidateTableName(t *testing.T) {
	long := strings.Repeat("a", maxTableNameLen)
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"syncguard_locks", true},
		{"_private", true},
		{"t1_locks", true},
		{long, true},
		{long + "a", false}, // idx_<name>_lock_id would pass 63 bytes
		{"", false},
		{"1locks", false},
		{"Locks", false}, // SyncGuard's unquoted name would fold to "locks"
		{"locks-table", false},
		{"locks table", false},
		{"public.locks", false},
		{`locks"; DROP TABLE x; --`, false},
		{"locks;", false},
		{"lócks", false},
	} {
		err := validateTableName(c.name)
		if (err == nil) != c.ok {
			t.Errorf("validateTableName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	base := Config{DSN: "postgres://localhost/db"}
	for _, c := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"custom", func(c *Config) { c.Table, c.FenceTable, c.AuditTable = "a", "b", "c" }, true},
		{"no dsn", func(c *Config) { c.DSN = " " }, false},
		{"fence equals locks", func(c *Config) { c.FenceTable = DefaultTable }, false},
		{"audit equals locks", func(c *Config) { c.AuditTable = DefaultTable }, false},
		{"audit equals fences", func(c *Config) { c.AuditTable = DefaultFenceTable }, false},
		{"bad lock table", func(c *Config) { c.Table = "x;y" }, false},
		{"bad fence table", func(c *Config) { c.FenceTable = "X" }, false},
		{"bad audit table", func(c *Config) { c.AuditTable = "a b" }, false},
		{"barrier equals locks", func(c *Config) { c.BarrierTable = DefaultTable }, false},
		{"barrier equals audit", func(c *Config) { c.BarrierTable = DefaultAuditTable }, false},
		{"bad barrier table", func(c *Config) { c.BarrierTable = "W" }, false},
		{"negative pool", func(c *Config) { c.MaxConns = -1 }, false},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.withDefaults().validate()
		if (err == nil) != c.ok {
			t.Errorf("%s: validate = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("%s: code %s, want InvalidArgument", c.name, lockstore.CodeOf(err))
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url  string
		want Config
	}{
		{"postgres://u:p@h:5432/db?sslmode=disable",
			Config{DSN: "postgres://u:p@h:5432/db?sslmode=disable"}},
		{"postgresql://h/db?table=my_locks&fenceTable=my_fences&auditTable=my_audit&barrierTable=my_writes&autoMigrate=false&pool_max_conns=3",
			Config{DSN: "postgresql://h/db?pool_max_conns=3", Table: "my_locks", FenceTable: "my_fences",
				AuditTable: "my_audit", BarrierTable: "my_writes", DisableAutoMigrate: true}},
		{"postgres://h/db?autoMigrate=true&auditMaxEvents=50&auditMaxAge=1h",
			Config{DSN: "postgres://h/db", AuditRetention: lockstore.AuditRetention{MaxEvents: 50, MaxAge: time.Hour}}},
	} {
		got, err := ParseURL(c.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseURL(%q) =\n  %+v\nwant\n  %+v", c.url, got, c.want)
		}
	}

	for _, bad := range []string{
		"redis://h/0",
		"mysql://h/db",
		"postgres://h/db?table=Bad-Name",
		"postgres://h/db?table=same&fenceTable=same",
		"postgres://h/db?autoMigrate=maybe",
		"postgres://h/db?auditMaxEvents=-3",
		"postgres://h/db?auditMaxAge=forever",
		"postgres://user:s3cret@h:bad-port/db%zz",
	} {
		_, err := ParseURL(bad)
		if lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("ParseURL(%q) = %v, want InvalidArgument", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL error leaks the password: %v", err)
		}
	}
}

// TestParseURLFenceFloor: the fenceFloor parameter every backend takes.
func TestParseURLFenceFloor(t *testing.T) {
	storetest.FenceFloorParam(t, func(q string) (backend.FenceFloor, error) {
		cfg, err := ParseURL("postgres://u@127.0.0.1:5432/db?" + q)
		return cfg.FenceFloor, err
	})
}
