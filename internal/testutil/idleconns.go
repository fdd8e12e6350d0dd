package testutil

import (
	"net"
	"testing"
)

// OpenIdleH2 opens n connections to addr that do what the idle-connection
// attack on our listeners did: half send the HTTP/2 preface and an empty
// SETTINGS frame (a finished handshake), half only the preface; then
// nothing. They are closed at the test's end.
func OpenIdleH2(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0} // length 0, type SETTINGS, no flags, stream 0
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		msg := []byte(preface)
		if i%2 == 0 {
			msg = append(msg, settings...)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}
