package wire

import (
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// TestStatusRoundTrip: every code's status maps back to the code, so a
// client that gets a bare status (no JSON body) still learns the code.
func TestStatusRoundTrip(t *testing.T) {
	for _, c := range lockstore.Codes {
		if got := CodeForStatus(HTTPStatus(c)); got != c {
			t.Errorf("CodeForStatus(HTTPStatus(%s) = %d) = %s", c, HTTPStatus(c), got)
		}
	}
	for status, want := range map[int]lockstore.Code{
		http.StatusForbidden: lockstore.AuthFailed, http.StatusRequestEntityTooLarge: lockstore.InvalidArgument,
		http.StatusUnsupportedMediaType: lockstore.InvalidArgument, http.StatusBadGateway: lockstore.ServiceUnavailable,
		http.StatusTeapot: lockstore.Internal, http.StatusOK: lockstore.Internal,
	} {
		if got := CodeForStatus(status); got != want {
			t.Errorf("CodeForStatus(%d) = %s, want %s", status, got, want)
		}
	}
}
