package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/lockstore"
	"github.com/fencegate/fencegate/lockstore/bolt"
	"github.com/fencegate/fencegate/lockstore/firestore"
	"github.com/fencegate/fencegate/lockstore/postgres"
	"github.com/fencegate/fencegate/lockstore/redis"
)

// backends is every store fencegate can run on: the one table that maps a
// URL scheme to a backend. cmd/fencegate is the only package that imports
// them all; the backends never import each other.
var backends = []backend{
	backendSpec[bolt.Config, *bolt.Store]{
		name: "bolt", schemes: []string{"bolt"},
		parse: bolt.ParseURL, open: bolt.Open,
		settings: func(c *bolt.Config) (*lockstore.AuditRetention, **slog.Logger) { return &c.AuditRetention, &c.Logger },
	}.row(),
	backendSpec[redis.Config, *redis.Store]{
		name: "redis", schemes: []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"},
		parse: redis.ParseURL, open: redis.Open,
		settings: func(c *redis.Config) (*lockstore.AuditRetention, **slog.Logger) { return &c.AuditRetention, &c.Logger },
	}.row(),
	backendSpec[postgres.Config, *postgres.Store]{
		name: "postgres", schemes: []string{"postgres", "postgresql"},
		parse: postgres.ParseURL, open: postgres.Open,
		settings: func(c *postgres.Config) (*lockstore.AuditRetention, **slog.Logger) {
			return &c.AuditRetention, &c.Logger
		},
		migrate: migratePostgres,
	}.row(),
	backendSpec[firestore.Config, *firestore.Store]{
		name: "firestore", schemes: []string{"firestore"},
		parse: firestore.ParseURL, open: firestore.Open,
		settings: func(c *firestore.Config) (*lockstore.AuditRetention, **slog.Logger) {
			return &c.AuditRetention, &c.Logger
		},
	}.row(),
}

// backend is one row of the table.
type backend struct {
	name    string
	schemes []string
	// parse checks a URL of this backend without connecting anywhere.
	parse func(rawURL string) (storeURL, error)
}

// storeURL is a parsed store URL: everything needed to open the store
// later, after the rest of the configuration was found valid.
type storeURL struct {
	backend string
	raw     string
	// open connects. Audit retention from the config file fills what the
	// URL left unset: the URL names one store, so it is the more specific.
	open func(ctx context.Context, retention lockstore.AuditRetention, log *slog.Logger) (lockstore.Store, error)
	// migrate creates the backend's schema; nil when it needs none. It
	// returns what it made, for the operator.
	migrate func(ctx context.Context) (string, error)
}

// backendSpec describes a backend package in its own types: its Config
// (C) and Store (S).
type backendSpec[C any, S lockstore.Store] struct {
	name    string
	schemes []string
	parse   func(string) (C, error)
	open    func(context.Context, C) (S, error)
	// settings points at the Config fields serve fills in.
	settings func(*C) (*lockstore.AuditRetention, **slog.Logger)
	// migrate is the backend's schema step (nil: none).
	migrate func(context.Context, C) (string, error)
}

func (b backendSpec[C, S]) row() backend {
	return backend{name: b.name, schemes: b.schemes, parse: func(raw string) (storeURL, error) {
		cfg, err := b.parse(raw)
		if err != nil {
			return storeURL{}, err
		}
		u := storeURL{backend: b.name, raw: raw}
		u.open = func(ctx context.Context, retention lockstore.AuditRetention, log *slog.Logger) (lockstore.Store, error) {
			c := cfg
			r, l := b.settings(&c)
			*r, *l = mergeRetention(*r, retention), log
			s, err := b.open(ctx, c)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		if b.migrate != nil {
			u.migrate = func(ctx context.Context) (string, error) { return b.migrate(ctx, cfg) }
		}
		return u, nil
	}}
}

// schemeNames lists every scheme the table knows, for messages.
func schemeNames() string {
	var names []string
	for _, b := range backends {
		for _, s := range b.schemes {
			names = append(names, s+"://")
		}
	}
	return strings.Join(names, ", ")
}

// errNoStoreURL is parseStoreURL's answer to an empty URL.
var errNoStoreURL = fmt.Errorf("a store URL is required (e.g. %s)", config.DefaultStore)

// parseStoreURL finds the backend for a URL's scheme and parses the URL;
// it connects to nothing. Errors never carry the URL's password.
func parseStoreURL(raw string) (storeURL, error) {
	if raw == "" {
		return storeURL{}, errNoStoreURL
	}
	scheme, _, _ := strings.Cut(raw, "://")
	for _, b := range backends {
		for _, s := range b.schemes {
			if s == scheme {
				u, err := b.parse(raw)
				if err != nil {
					return storeURL{}, fmt.Errorf("%s: %w", config.RedactURL(raw), err)
				}
				return u, nil
			}
		}
	}
	return storeURL{}, fmt.Errorf("unsupported URL %q: use %s", config.RedactURL(raw), schemeNames())
}

// Open connects to the store.
func (u storeURL) Open(ctx context.Context, retention lockstore.AuditRetention, log *slog.Logger) (lockstore.Store, error) {
	s, err := u.open(ctx, retention, log)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", config.RedactURL(u.raw), err)
	}
	return s, nil
}

// errNoSchema is the migrate hook's absence: the backend creates what it
// needs on first use.
var errNoSchema = errors.New("this store needs no schema")

// Migrate creates the store's schema.
func (u storeURL) Migrate(ctx context.Context) (string, error) {
	if u.migrate == nil {
		return "", errNoSchema
	}
	return u.migrate(ctx)
}

func migratePostgres(ctx context.Context, cfg postgres.Config) (string, error) {
	if err := postgres.Migrate(ctx, cfg); err != nil {
		return "", err
	}
	return fmt.Sprintf("tables %s, %s, %s, %s", orDefault(cfg.Table, postgres.DefaultTable),
		orDefault(cfg.FenceTable, postgres.DefaultFenceTable), orDefault(cfg.AuditTable, postgres.DefaultAuditTable),
		orDefault(cfg.BarrierTable, postgres.DefaultBarrierTable)), nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// mergeRetention lets the config file's audit retention fill what the store
// URL left unset: the URL names one store, so it is the more specific.
func mergeRetention(fromURL, fromConfig lockstore.AuditRetention) lockstore.AuditRetention {
	if fromURL.MaxEvents == 0 {
		fromURL.MaxEvents = fromConfig.MaxEvents
	}
	if fromURL.MaxInputEvents == 0 {
		fromURL.MaxInputEvents = fromConfig.MaxInputEvents
	}
	if fromURL.MaxAge == 0 {
		fromURL.MaxAge = fromConfig.MaxAge
	}
	return fromURL
}
