package config

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// setting is one option settable by flag and by FENCEGATE_<NAME>.
type setting struct {
	name  string // flag name; the env var is FENCEGATE_ + upper(name with - → _)
	usage string
	set   func(c *Config, v string) error
	bool  bool
}

var settings = []setting{
	{name: "store", usage: "store URL: bolt:///abs.db, bolt://./rel.db, redis://…, rediss://…, redis+sentinel://…, postgres://…, firestore://PROJECT (default " + DefaultStore + ")",
		set: func(c *Config, v string) error { c.Store = v; return nil }},
	{name: "http-addr", usage: "HTTP lock API, forward-auth, health and metrics listener, or \"off\" (default " + DefaultHTTPAddr + ")",
		set: func(c *Config, v string) error { c.HTTP.Addr = v; return nil }},
	{name: "grpc-addr", usage: "gRPC lock API listener, or \"off\" (default " + DefaultGRPCAddr + ")",
		set: func(c *Config, v string) error { c.GRPC.Addr = v; return nil }},
	{name: "authz-addr", usage: "Envoy ext_authz gRPC listener, or \"off\" (default " + DefaultAuthzAddr + ")",
		set: func(c *Config, v string) error { c.Authz.Addr = v; return nil }},
	{name: "authz-http-addr", usage: "forward-auth (/v1/authz/check) on a listener of its own instead of the HTTP lock API's, or \"off\" (default off)",
		set: func(c *Config, v string) error { c.Authz.HTTP.Addr = v; return nil }},
	{name: "admission-addr", usage: "Kubernetes admission webhook HTTPS listener, or \"off\"; served only with a certificate (default " + DefaultAdmissionAddr + ")",
		set: func(c *Config, v string) error { c.Admission.Addr = v; return nil }},
	{name: "admission-tls-cert", usage: "admission webhook certificate file (re-read on change)",
		set: func(c *Config, v string) error { c.Admission.TLS.CertFile = v; return nil }},
	{name: "admission-tls-key", usage: "admission webhook key file (re-read on change)",
		set: func(c *Config, v string) error { c.Admission.TLS.KeyFile = v; return nil }},
	{name: "insecure", bool: true, usage: "allow the lock API on a non-loopback address without tokens",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("must be true or false, got %q", v)
			}
			c.Insecure = b
			return nil
		}},
	{name: "trust-loopback", bool: true, usage: "trust ext_authz, ext_proc and forward-auth callers from loopback (never 127.0.0.6) as the operator's proxy: fence_route, inline options, the barrier (config check.trustLoopback; default false; never behind a sidecar)",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("must be true or false, got %q", v)
			}
			c.Check.TrustLoopback = b
			return nil
		}},
	{name: "log-level", usage: "debug, info, warn or error (default info)",
		set: func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{name: "log-format", usage: "text or json (default text)",
		set: func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{name: "log-access", usage: "HTTP access log: off, errors (4xx, 5xx and slow requests) or all (default errors)",
		set: func(c *Config, v string) error { c.Log.Access = v; return nil }},
	{name: "max-conns", usage: "connections one listener holds open; when full it closes its longest-idle connection (default 1024)",
		set: func(c *Config, v string) error { return setInt(&c.Connections.MaxPerListener, v) }},
	{name: "max-conns-per-peer", usage: "connections one remote IP holds open on one listener (default 64)",
		set: func(c *Config, v string) error { return setInt(&c.Connections.MaxPerPeer, v) }},
	{name: "max-requests-per-peer", usage: "requests (HTTP/2 streams and gRPC calls each count) one remote IP has in flight on one listener; one more is refused 429 / RESOURCE_EXHAUSTED (default 256)",
		set: func(c *Config, v string) error { return setInt(&c.Connections.MaxRequestsPerPeer, v) }},
	{name: "shutdown-delay", usage: "after SIGTERM or SIGINT, how long every listener keeps serving while /readyz answers 503 and gRPC health NOT_SERVING, before draining (config shutdown.delay; default 0s)",
		set: func(c *Config, v string) error { return setDuration(&c.Shutdown.Delay, v) }},
	{name: "debug-addr", usage: "net/http/pprof listener, e.g. 127.0.0.1:6060 (default off; a non-loopback address is served with a warning)",
		set: func(c *Config, v string) error { c.Debug.Addr = v; return nil }},
}

func setInt(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("must be an integer, got %q", v)
	}
	*dst = n
	return nil
}

func setDuration(dst *Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("must be a duration such as 5s, got %q", v)
	}
	*dst = Duration(d)
	return nil
}

// EnvName returns the environment variable for a flag name.
func EnvName(flagName string) string {
	b := []byte("FENCEGATE_")
	for i := 0; i < len(flagName); i++ {
		ch := flagName[i]
		switch {
		case ch == '-':
			ch = '_'
		case ch >= 'a' && ch <= 'z':
			ch -= 'a' - 'A'
		}
		b = append(b, ch)
	}
	return string(b)
}

// Flags registers serve's flags on fs and returns a loader that, after
// fs.Parse, builds the Config: defaults, then the config file (--config or
// FENCEGATE_CONFIG), then FENCEGATE_* variables, then the flags that were set.
// The returned error lists every problem.
func Flags(fs *flag.FlagSet) func(getenv func(string) string) (Config, error) {
	load := FlagsFile(fs)
	return func(getenv func(string) string) (Config, error) {
		c, _, err := load(getenv)
		return c, err
	}
}

// File is the config file as a loader read it, once: what a command that
// reloads it later compares with, without reading it a second time.
type File struct {
	// Path is the file read ("": no config file).
	Path string
	// Content is its content as read and applied.
	Content []byte
	// Config is the file alone over the defaults (no FENCEGATE_* variable,
	// no flag), its routesFile included: what a reload of the same file
	// loads.
	Config Config
}

// FlagsFile is Flags whose loader also returns the config file it read.
func FlagsFile(fs *flag.FlagSet) func(getenv func(string) string) (Config, File, error) {
	configPath := fs.String("config", "", "YAML config file (env FENCEGATE_CONFIG)")
	values := make(map[string]string, len(settings))
	for _, s := range settings {
		usage := s.usage + " (env " + EnvName(s.name) + ")"
		record := func(v string) error { values[s.name] = v; return nil }
		if s.bool {
			fs.BoolFunc(s.name, usage, record)
		} else {
			fs.Func(s.name, usage, record)
		}
	}
	return func(getenv func(string) string) (Config, File, error) {
		c := Default()
		f := File{Path: *configPath}
		if f.Path == "" {
			f.Path = getenv("FENCEGATE_CONFIG")
		}
		if f.Path != "" {
			b, err := ReadFile(f.Path)
			if err != nil {
				return c, f, Problems{fmt.Errorf("config: %w", err).Error()}
			}
			if err := c.LoadBytes(f.Path, b); err != nil {
				return c, f, Problems{err.Error()}
			}
			f.Content = b
		}
		f.Config = c
		var p Problems
		for _, s := range settings {
			if v := getenv(EnvName(s.name)); v != "" {
				if err := s.set(&c, v); err != nil {
					p = append(p, fmt.Sprintf("%s: %v", EnvName(s.name), err))
				}
			}
		}
		for _, s := range settings {
			if v, ok := values[s.name]; ok {
				if err := s.set(&c, v); err != nil {
					p = append(p, fmt.Sprintf("--%s: %v", s.name, err))
				}
			}
		}
		if err := c.IncludeRoutesFile(); err != nil {
			p = append(p, err.Error())
		}
		// The file alone has the same table: no variable or flag sets
		// routes: or routesFile.
		f.Config.Routes, f.Config.RoutesFileSum = slices.Clone(c.Routes), c.RoutesFileSum
		if err := c.Validate(); err != nil {
			p = append(p, err.(Problems)...)
		}
		if len(p) > 0 {
			return c, f, p
		}
		return c, f, nil
	}
}
