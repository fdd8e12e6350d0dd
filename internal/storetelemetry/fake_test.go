package storetelemetry_test

import (
	"context"

	"github.com/fencegate/fencegate/internal/testutil/locktest"
	"github.com/fencegate/fencegate/lockstore"
)

// memStore is locktest's in-memory Store, for testing the helpers
// (WithTelemetry): its calls are recorded and its hooks script
// failures.
type memStore = locktest.MemStore

var newMemStore = locktest.NewMemStore

// auditMemStore adds the optional interfaces.
type auditMemStore struct {
	*memStore
	appended int
}

func (a *auditMemStore) AppendAudit(_ context.Context, ev []lockstore.AuditEvent) error {
	a.appended += len(ev)
	return nil
}

func (a *auditMemStore) QueryAudit(context.Context, lockstore.AuditQuery) ([]lockstore.AuditEvent, error) {
	return []lockstore.AuditEvent{{Reason: "stale"}}, nil
}

type counterMemStore struct{ *memStore }

func (c counterMemStore) CountHeld(context.Context) (int64, error) { return 7, nil }

type fullMemStore struct {
	*auditMemStore
}

func (f fullMemStore) CountHeld(context.Context) (int64, error) { return 7, nil }
