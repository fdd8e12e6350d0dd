package wire

import (
	"testing"

	"github.com/fencegate/fencegate/lockstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGRPCStatusRoundTrip: every code survives GRPCStatus → CodeFromStatus,
// forbidden or not, and the bare status code maps back to the code for all
// but AcquisitionTimeout, which shares DEADLINE_EXCEEDED with
// NetworkTimeout and so needs the detail.
func TestGRPCStatusRoundTrip(t *testing.T) {
	for _, c := range lockstore.Codes {
		for _, forbidden := range []bool{false, true} {
			st := GRPCStatus(c, forbidden, "m")
			if got := CodeFromStatus(st); got != c {
				t.Errorf("CodeFromStatus(GRPCStatus(%s, %v)) = %q", c, forbidden, got)
			}
			if st.Message() != "m" {
				t.Errorf("GRPCStatus(%s) message %q", c, st.Message())
			}
		}
		want := c
		if c == lockstore.AcquisitionTimeout {
			want = lockstore.NetworkTimeout
		}
		if got := CodeForGRPC(GRPCCode(c)); got != want {
			t.Errorf("CodeForGRPC(GRPCCode(%s) = %s) = %s, want %s", c, GRPCCode(c), got, want)
		}
	}
	if got := GRPCStatus(lockstore.AuthFailed, true, "").Code(); got != codes.PermissionDenied {
		t.Errorf("forbidden AuthFailed is %s, want PermissionDenied", got)
	}
	if got := GRPCStatus(lockstore.InvalidArgument, true, "").Code(); got != codes.InvalidArgument {
		t.Errorf("forbidden only changes AuthFailed; InvalidArgument became %s", got)
	}
	for sc, want := range map[codes.Code]lockstore.Code{
		codes.PermissionDenied: lockstore.AuthFailed, codes.Unknown: lockstore.Internal,
		codes.Unimplemented: lockstore.Internal, codes.OK: lockstore.Internal,
	} {
		if got := CodeForGRPC(sc); got != want {
			t.Errorf("CodeForGRPC(%s) = %s, want %s", sc, got, want)
		}
	}
}

// TestCodeFromStatusTrustsOnlyOurDetail: a status without our ErrorInfo,
// with another domain's, or naming a code we do not know names no code.
func TestCodeFromStatusTrustsOnlyOurDetail(t *testing.T) {
	with := func(info *errdetails.ErrorInfo) *status.Status {
		st, err := status.New(codes.Internal, "x").WithDetails(info)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for name, st := range map[string]*status.Status{
		"no detail":      status.New(codes.Unavailable, "x"),
		"other domain":   with(&errdetails.ErrorInfo{Reason: string(lockstore.RateLimited), Domain: "example.com"}),
		"unknown code":   with(&errdetails.ErrorInfo{Reason: "Locked", Domain: ErrorDomain}),
		"empty reason":   with(&errdetails.ErrorInfo{Domain: ErrorDomain}),
		"lowercase code": with(&errdetails.ErrorInfo{Reason: "authfailed", Domain: ErrorDomain}),
	} {
		if got := CodeFromStatus(st); got != "" {
			t.Errorf("%s: CodeFromStatus = %q, want none", name, got)
		}
	}
}
