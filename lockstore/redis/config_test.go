package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/backend"
	"github.com/fencegate/fencegate/lockstore/storetest"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		name  string
		url   string
		check func(t *testing.T, c Config)
	}{
		{"plain", "redis://127.0.0.1:6380/3", func(t *testing.T, c Config) {
			if c.Options == nil || c.Options.Addr != "127.0.0.1:6380" || c.Options.DB != 3 || c.Options.TLSConfig != nil {
				t.Fatalf("Options = %+v", c.Options)
			}
			if c.Prefix != "" || c.Failover != nil {
				t.Errorf("Prefix %q Failover %v, want defaults", c.Prefix, c.Failover)
			}
		}},
		{"credentials and prefix", "redis://app:s3cr%40t@localhost:6379/0?prefix=team:a", func(t *testing.T, c Config) {
			if c.Options.Username != "app" || c.Options.Password != "s3cr@t" {
				t.Errorf("credentials = %q/%q", c.Options.Username, c.Options.Password)
			}
			if c.Prefix != "team:a" {
				t.Errorf("Prefix = %q", c.Prefix)
			}
		}},
		{"tls", "rediss://redis.example:6390?prefix=p", func(t *testing.T, c Config) {
			if c.Options.TLSConfig == nil || c.Options.TLSConfig.ServerName != "redis.example" {
				t.Errorf("TLSConfig = %+v, want ServerName redis.example", c.Options.TLSConfig)
			}
		}},
		{"go-redis options pass through", "redis://h:1/0?dial_timeout=750ms&pool_size=7&cleanup=true&auditMaxEvents=50&auditMaxAge=1h", func(t *testing.T, c Config) {
			if c.Options.DialTimeout != 750*time.Millisecond || c.Options.PoolSize != 7 {
				t.Errorf("DialTimeout %v PoolSize %d", c.Options.DialTimeout, c.Options.PoolSize)
			}
			if !c.CleanupInIsLocked || c.AuditRetention.MaxEvents != 50 || c.AuditRetention.MaxAge != time.Hour {
				t.Errorf("own params = %v %+v", c.CleanupInIsLocked, c.AuditRetention)
			}
		}},
		{"sentinel", "redis+sentinel://u:pw@10.0.0.1:26380,10.0.0.2,10.0.0.3:26381/2?master=locks&prefix=P&sentinel_password=spw", func(t *testing.T, c Config) {
			f := c.Failover
			if f == nil || c.Options != nil {
				t.Fatalf("Failover = %+v Options = %+v", f, c.Options)
			}
			want := []string{"10.0.0.1:26380", "10.0.0.2:26379", "10.0.0.3:26381"}
			if strings.Join(f.SentinelAddrs, ",") != strings.Join(want, ",") {
				t.Errorf("SentinelAddrs = %v, want %v", f.SentinelAddrs, want)
			}
			if f.MasterName != "locks" || f.DB != 2 || c.Prefix != "P" {
				t.Errorf("MasterName %q DB %d Prefix %q", f.MasterName, f.DB, c.Prefix)
			}
			if f.Username != "u" || f.Password != "pw" || f.SentinelPassword != "spw" || f.SentinelUsername != "" {
				t.Errorf("credentials: server %q/%q sentinel %q/%q", f.Username, f.Password, f.SentinelUsername, f.SentinelPassword)
			}
			if f.TLSConfig != nil {
				t.Error("TLS on a redis+sentinel URL")
			}
		}},
		{"sentinel tls", "rediss+sentinel://s1:26379?master=m", func(t *testing.T, c Config) {
			if c.Failover == nil || c.Failover.TLSConfig == nil {
				t.Fatalf("Failover = %+v, want TLS", c.Failover)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseURL(c.url)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			c.check(t, cfg)
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	cases := []struct{ name, url string }{
		{"no scheme", "localhost:6379"},
		{"other scheme", "postgres://x"},
		{"sentinel without master", "redis+sentinel://h:26379/0"},
		{"several hosts without sentinel", "redis://a:1,b:2/0"},
		{"unknown option", "redis://h:1/0?frobnicate=1"},
		{"bad db", "redis://h:1/zero"},
		{"bad cleanup", "redis://h:1/0?cleanup=maybe"},
		{"bad audit age", "redis://h:1/0?auditMaxAge=-1h"},
		{"empty sentinel host", "redis+sentinel://a:1,,b:2?master=m"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseURL(c.url + "&password=hunter2")
			if err == nil {
				_, err = ParseURL(c.url)
			}
			if err == nil {
				t.Fatalf("ParseURL(%q) succeeded", c.url)
			}
			if got := lockstore.CodeOf(err); got != lockstore.InvalidArgument {
				t.Errorf("code = %s, want InvalidArgument (%v)", got, err)
			}
		})
	}
	// A malformed URL's error must not echo the password.
	_, err := ParseURL("redis://user:hunter2@h:1/0?frobnicate=1")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v echoes the password", err)
	}
}

func TestNormalizePrefix(t *testing.T) {
	ok := []struct{ in, want string }{
		{"", DefaultPrefix},
		{":::", DefaultPrefix},
		{"syncguard", "syncguard"},
		{"team:a::", "team:a"},
		{"fences", "fences"},
		{"fencegate", "fencegate"},
	}
	for _, c := range ok {
		got, err := normalizePrefix(c.in, LayoutSyncGuard)
		if err != nil || got != c.want {
			t.Errorf("normalizePrefix(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	bad := []string{"a:fence:b", "fence:", "x:fence:", "myfence", "fence", "team.fencegate", "syncguard.fencegate:", strings.Repeat("p", 960), "\xff"}
	for _, in := range bad {
		if _, err := normalizePrefix(in, LayoutSyncGuard); lockstore.CodeOf(err) != lockstore.InvalidArgument {
			t.Errorf("normalizePrefix(%.20q) = %v, want InvalidArgument", in, err)
		}
	}
}

func TestClientOptionsInvariants(t *testing.T) {
	cfg, err := ParseURL("redis://h:1/0?max_retries=5&read_timeout=9s")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := cfg.clientOptions()
	if o.MaxRetries != -1 || !o.ContextTimeoutEnabled || o.DialerRetries != 1 {
		t.Errorf("MaxRetries %d ContextTimeoutEnabled %v DialerRetries %d; want -1, true, 1", o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries)
	}
	if o.ReadTimeout != 9*time.Second || o.DialTimeout != DefaultDialTimeout || o.WriteTimeout != DefaultWriteTimeout {
		t.Errorf("timeouts read %v dial %v write %v", o.ReadTimeout, o.DialTimeout, o.WriteTimeout)
	}
	if cfg.Options.MaxRetries != 5 {
		t.Error("clientOptions modified the caller's Options")
	}
}

// TestParseURLFenceFloor: the fenceFloor parameter every backend takes.
func TestParseURLFenceFloor(t *testing.T) {
	storetest.FenceFloorParam(t, func(q string) (backend.FenceFloor, error) {
		cfg, err := ParseURL("redis://127.0.0.1:6379/0?" + q)
		return cfg.FenceFloor, err
	})
}
