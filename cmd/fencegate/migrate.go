package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencegate/fencegate/config"
)

// runMigrate creates a store's schema (PostgreSQL's tables and indexes),
// for teams that pre-create schema and run the gateway with autoMigrate=false.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "")
	store := fs.String("store", envOr("FENCEGATE_STORE", ""), "postgres:// store URL (env FENCEGATE_STORE)")
	if code, ok := parseFlags(fs, args, stdout, stderr, exitUsage); !ok {
		return code
	}
	if *store == "" {
		// Not parseStoreURL's hint: its example is a bolt URL, which needs
		// no schema and which migrate refuses.
		fmt.Fprintln(stderr, "fencegate migrate: --store is required: the postgres:// URL of the database (e.g. postgres://fencegate@db.internal/fencegate); other stores need no schema")
		return exitUsage
	}
	u, err := parseStoreURL(*store)
	if err != nil {
		fmt.Fprintln(stderr, "fencegate migrate: --store:", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	made, err := u.Migrate(ctx)
	if errors.Is(err, errNoSchema) {
		fmt.Fprintf(stderr, "fencegate migrate: --store must be a postgres:// URL (%s stores need no schema)\n", u.backend)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "fencegate migrate %s: %v\n", config.RedactURL(*store), err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "schema ready: %s\n", made)
	return exitOK
}
