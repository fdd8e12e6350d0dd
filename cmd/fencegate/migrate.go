package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/lockstore/postgres"
)

// runMigrate creates the PostgreSQL tables and indexes, for teams that
// pre-create schema and run the gateway with autoMigrate=false.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", envOr("FENCEGATE_STORE", ""), "postgres:// store URL (env FENCEGATE_STORE)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if !strings.HasPrefix(*store, "postgres://") && !strings.HasPrefix(*store, "postgresql://") {
		fmt.Fprintln(stderr, "fencegate migrate: --store must be a postgres:// URL (the other stores need no schema)")
		return exitUsage
	}
	cfg, err := postgres.ParseURL(*store)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate migrate:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := postgres.Migrate(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "fencegate migrate %s: %v\n", config.RedactURL(*store), err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "schema ready: tables %s, %s, %s, %s\n", orDefault(cfg.Table, postgres.DefaultTable), orDefault(cfg.FenceTable, postgres.DefaultFenceTable), orDefault(cfg.AuditTable, postgres.DefaultAuditTable), orDefault(cfg.BarrierTable, postgres.DefaultBarrierTable))
	return exitOK
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
