package client

import (
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/lockstore"
)

// tokenCase is one constructor call and whether it must be refused for
// putting the token on the wire in plaintext to a host that is not
// loopback.
type tokenCase struct {
	grpc    bool
	target  string
	opts    []Option
	refused bool
}

var tokenCases = []tokenCase{
	// HTTP.
	{false, "http://10.0.0.7:8080", []Option{WithToken("t")}, true},
	{false, "http://fencegate.example:8080", []Option{WithToken("t")}, true},
	{false, "http://127.0.0.1.example:8080", []Option{WithToken("t")}, true},
	{false, "http://[2001:db8::1]:8080", []Option{WithToken("t")}, true},
	{false, "http://10.0.0.7:8080", []Option{WithToken("t"), WithInsecureToken()}, false},
	{false, "http://10.0.0.7:8080", nil, false}, // no token, nothing to leak
	{false, "https://10.0.0.7:8080", []Option{WithToken("t")}, false},
	{false, "http://127.0.0.1:8080", []Option{WithToken("t")}, false},
	{false, "http://127.1.2.3:8080", []Option{WithToken("t")}, false},
	{false, "http://[::1]:8080", []Option{WithToken("t")}, false},
	{false, "http://LOCALHOST:8080", []Option{WithToken("t")}, false},
	// gRPC.
	{true, "10.0.0.7:9090", []Option{WithToken("t")}, true},
	{true, "dns:///fencegate.example:9090", []Option{WithToken("t")}, true},
	{true, "dns://8.8.8.8/fencegate.example:9090", []Option{WithToken("t")}, true},
	{true, "passthrough:///10.0.0.7:9090", []Option{WithToken("t")}, true},
	{true, "fencegate.example", []Option{WithToken("t")}, true},
	{true, "[2001:db8::1]:9090", []Option{WithToken("t")}, true},
	{true, "xds:///fencegate", []Option{WithToken("t")}, true},
	{true, "dns://8.8.8.8/localhost:9090", []Option{WithToken("t")}, true}, // its DNS server decides
	{true, "dns://8.8.8.8/127.0.0.1:9090", []Option{WithToken("t")}, false},
	{true, "10.0.0.7:9090", []Option{WithToken("t"), WithInsecureToken()}, false},
	{true, "10.0.0.7:9090", nil, false},
	{true, "10.0.0.7:9090", []Option{WithToken("t"), WithTLSConfig(nil)}, false},
	{true, "127.0.0.1:9090", []Option{WithToken("t")}, false},
	{true, "localhost:9090", []Option{WithToken("t")}, false},
	{true, "dns:///localhost:9090", []Option{WithToken("t")}, false},
	{true, "passthrough:///127.0.0.1:9090", []Option{WithToken("t")}, false},
	{true, "[::1]:9090", []Option{WithToken("t")}, false},
	{true, "unix:///run/fencegate.sock", []Option{WithToken("t")}, false},
	{true, "unix:fencegate.sock", []Option{WithToken("t")}, false},
}

// tokenFailures runs tokenCases, with extra options appended to each, and
// lists the cases whose outcome is wrong.
func tokenFailures(extra ...Option) []string {
	var bad []string
	for _, tc := range tokenCases {
		opts := append(append([]Option{}, tc.opts...), extra...)
		var err error
		if tc.grpc {
			var c *GRPCClient
			if c, err = NewGRPC(tc.target, opts...); err == nil {
				_ = c.Close()
			}
		} else {
			_, err = New(tc.target, opts...)
		}
		refused := lockstore.CodeOf(err) == lockstore.InvalidArgument
		if refused != tc.refused || (err != nil && !refused) {
			bad = append(bad, fmt.Sprintf("%q with %d options: refused=%v, want %v (err %v)", tc.target, len(tc.opts), refused, tc.refused, err))
		}
	}
	return bad
}

// TestNoTokenInPlaintextToARemoteHost: both constructors refuse a token
// without TLS to a host that is not loopback, unless WithInsecureToken.
// The same table run with a broken loopback check (everything is local)
// must fail, or it would not catch a client that leaks the token.
func TestNoTokenInPlaintextToARemoteHost(t *testing.T) {
	for _, b := range tokenFailures() {
		t.Error(b)
	}
	broken := func(o *options) { o.isLocal = func(string) bool { return true } }
	if len(tokenFailures(broken)) == 0 {
		t.Error("the table passes with a loopback check that accepts every host: it cannot catch a leak")
	}
}
