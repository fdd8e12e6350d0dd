// Command orders is an example API behind fencegate that makes the last
// step exact itself: it reads the fence the edge verified (fenceguard),
// verifies the holder's signed write proof against the gateway's published
// keys, and commits every order write together with its fence in one
// PostgreSQL transaction (pgfence), refusing a write under a fence older
// than one already committed for the order. Writes sent with
// "Prefer: respond-async" are answered 202 at once and committed later by
// a worker, under the same rule; GET /jobs/{id} tells how each ended.
//
//	orders --listen 127.0.0.1:3000 --database postgres://… --gateway http://127.0.0.1:8080
//
// Routes:
//
//	PUT  /orders/{id}  {"item":"…","qty":N}   write (fenced; lock key "orders/{id}")
//	GET  /orders/{id}                         read
//	GET  /jobs/{id}                           an async write's outcome
//	POST /jobs/drain                          the queued writes commit now, without --queue-delay (the demo)
//
// run.sh starts PostgreSQL, fencegate (lock API, forward-auth and the
// fencing proxy), nginx and this API, and walks through a demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fenceguard"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address to serve the API on")
	database := flag.String("database", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	gateway := flag.String("gateway", "http://127.0.0.1:8080", `fencegate's HTTP base URL, for its proof keys (GET /v1/proof/keys); "" turns proof verification off`)
	table := flag.String("table", "orders", "the orders table (its fence table is <table>_fences)")
	queueDelay := flag.Duration("queue-delay", 0, "how long the async worker waits before each commit (a slow queue, to watch a late commit refused)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, *database, *gateway, *table, *queueDelay, log); err != nil {
		log.Error("orders: " + err.Error())
		os.Exit(1)
	}
}

func run(listen, database, gateway, table string, queueDelay time.Duration, log *slog.Logger) error {
	if database == "" {
		return errors.New("no database: set --database or DATABASE_URL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := pgxpool.New(ctx, database)
	if err != nil {
		return err
	}
	defer db.Close()
	var proofs fenceguard.ProofVerifier
	if gateway != "" {
		proofs = fenceguard.NewKeySet(gateway+"/v1/proof/keys", fenceguard.KeySetOptions{Log: log})
	}
	s, err := newServer(ctx, db, config{Table: table, Proofs: proofs, QueueDelay: queueDelay, Log: log})
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("orders ready", "listen", l.Addr().String(), "proofs", proofs != nil)
	fmt.Fprintf(os.Stdout, "orders listening on %s\n", l.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
