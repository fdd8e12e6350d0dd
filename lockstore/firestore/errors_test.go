package firestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/lockstore"
)

func TestClassifyStatusCodes(t *testing.T) {
	cases := []struct {
		code codes.Code
		want lockstore.Code
	}{
		{codes.Aborted, lockstore.ServiceUnavailable},
		{codes.Unavailable, lockstore.ServiceUnavailable},
		{codes.DeadlineExceeded, lockstore.ServiceUnavailable},
		{codes.Internal, lockstore.ServiceUnavailable},
		{codes.Canceled, lockstore.ServiceUnavailable},
		{codes.PermissionDenied, lockstore.AuthFailed},
		{codes.Unauthenticated, lockstore.AuthFailed},
		{codes.ResourceExhausted, lockstore.RateLimited},
		{codes.InvalidArgument, lockstore.InvalidArgument},
		{codes.FailedPrecondition, lockstore.InvalidArgument},
		{codes.OutOfRange, lockstore.InvalidArgument},
		{codes.NotFound, lockstore.InvalidArgument},
		{codes.AlreadyExists, lockstore.Internal},
		{codes.Unimplemented, lockstore.Internal},
		{codes.DataLoss, lockstore.Internal},
		{codes.Unknown, lockstore.Internal},
	}
	for _, c := range cases {
		t.Run(c.code.String(), func(t *testing.T) {
			src := status.Error(c.code, "boom")
			err := classify(context.Background(), "acquire", src)
			if got := lockstore.CodeOf(err); got != c.want {
				t.Fatalf("classify(%s) = %s, want %s", c.code, got, c.want)
			}
			var le *lockstore.Error
			if !errors.As(err, &le) || le.Op != "acquire" {
				t.Fatalf("classify(%s) = %#v, want *lockstore.Error with Op acquire", c.code, err)
			}
			if status.Code(err) != c.code {
				t.Fatalf("the status code %s is not reachable through the chain of %v", c.code, err)
			}
			// Wrapped, as the client library sometimes returns them.
			if got := lockstore.CodeOf(classify(context.Background(), "acquire", fmt.Errorf("iterating: %w", src))); got != c.want {
				t.Fatalf("classify(wrapped %s) = %s, want %s", c.code, got, c.want)
			}
		})
	}
}

func TestClassifyContextDecidesFirst(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()

	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want lockstore.Code
	}{
		{"cancelled ctx, grpc Canceled", cancelled, status.Error(codes.Canceled, "context canceled"), lockstore.Aborted},
		{"cancelled ctx, grpc Unavailable", cancelled, status.Error(codes.Unavailable, "x"), lockstore.Aborted},
		{"expired ctx, grpc DeadlineExceeded", expired, status.Error(codes.DeadlineExceeded, "x"), lockstore.NetworkTimeout},
		{"live ctx, bare context.Canceled", context.Background(), context.Canceled, lockstore.Aborted},
		{"live ctx, bare DeadlineExceeded", context.Background(), fmt.Errorf("rpc: %w", context.DeadlineExceeded), lockstore.NetworkTimeout},
		{"live ctx, plain error", context.Background(), errors.New("weird"), lockstore.Internal},
		{"our own error passes", cancelled, lockstore.Errorf(lockstore.Internal, "acquire", "overflow"), lockstore.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := lockstore.CodeOf(classify(c.ctx, "release", c.err)); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
	if classify(context.Background(), "x", nil) != nil {
		t.Fatal("classify(nil) must be nil")
	}
}

func TestClassifyRedactsDocumentPaths(t *testing.T) {
	raw := "projects/p/databases/(default)/documents/locks/secret-user-key"
	err := classify(context.Background(), "acquire", status.Error(codes.InvalidArgument, "bad document "+raw))
	if strings.Contains(err.Error(), "secret-user-key") {
		t.Fatalf("error text leaks a document ID: %v", err)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("redaction lost the status: %v", err)
	}
	// A description without a document path (a missing index) is kept.
	idx := "The query requires an index. You can create it here: https://console.example/idx"
	err = classify(context.Background(), "queryAudit", status.Error(codes.FailedPrecondition, idx))
	if !strings.Contains(err.Error(), "requires an index") {
		t.Fatalf("useful description dropped: %v", err)
	}
}
