package main

import (
	"context"
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

// openStore opens the store a URL names. It is the one place that knows
// every backend; the backends never import each other.
func openStore(ctx context.Context, rawURL string, retention lockstore.AuditRetention, log *slog.Logger) (lockstore.Store, error) {
	scheme, _, _ := strings.Cut(rawURL, "://")
	wrap := func(err error) error {
		return fmt.Errorf("store %s: %w", config.RedactURL(rawURL), err)
	}
	switch scheme {
	case "bolt":
		cfg, err := bolt.ParseURL(rawURL)
		if err != nil {
			return nil, wrap(err)
		}
		cfg.Logger, cfg.AuditRetention = log, mergeRetention(cfg.AuditRetention, retention)
		s, err := bolt.Open(ctx, cfg)
		if err != nil {
			return nil, wrap(err)
		}
		return s, nil
	case "redis", "rediss", "redis+sentinel":
		cfg, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, wrap(err)
		}
		cfg.Logger, cfg.AuditRetention = log, mergeRetention(cfg.AuditRetention, retention)
		s, err := redis.Open(ctx, cfg)
		if err != nil {
			return nil, wrap(err)
		}
		return s, nil
	case "postgres", "postgresql":
		cfg, err := postgres.ParseURL(rawURL)
		if err != nil {
			return nil, wrap(err)
		}
		cfg.Logger, cfg.Audit = log, mergeRetention(cfg.Audit, retention)
		s, err := postgres.Open(ctx, cfg)
		if err != nil {
			return nil, wrap(err)
		}
		return s, nil
	case "firestore":
		cfg, err := firestore.ParseURL(rawURL)
		if err != nil {
			return nil, wrap(err)
		}
		cfg.Logger, cfg.AuditRetention = log, mergeRetention(cfg.AuditRetention, retention)
		s, err := firestore.Open(ctx, cfg)
		if err != nil {
			return nil, wrap(err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("store %s: unsupported scheme %q (bolt, redis, rediss, redis+sentinel, postgres, firestore)", config.RedactURL(rawURL), scheme)
}

// mergeRetention lets the config file's audit retention fill what the store
// URL left unset: the URL names one store, so it is the more specific.
func mergeRetention(fromURL, fromConfig lockstore.AuditRetention) lockstore.AuditRetention {
	if fromURL.MaxEvents == 0 {
		fromURL.MaxEvents = fromConfig.MaxEvents
	}
	if fromURL.MaxAge == 0 {
		fromURL.MaxAge = fromConfig.MaxAge
	}
	return fromURL
}
