package lockserver

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// AccessLog selects which requests get an access log line: HTTP requests
// through Middleware and calls of the gRPC lock API. Failed requests are also reported by the error log (warn and
// error level, with the cause) whatever this says.
type AccessLog int

const (
	// AccessErrors logs requests answered 4xx or 5xx (gRPC: a status other
	// than OK) and requests that took at least SlowRequest: what an operator
	// reads. It leaves out the answers that are outcomes, not faults: 409
	// (a lock held, a stale fence: counted in metrics, denials audited), 428
	// and 429 (an edge denial, audited), and streams that are long by design
	// (the console's event stream). It is the default (the zero value): at
	// thousands of requests a second one info line per success is a cost
	// no one asked for.
	AccessErrors AccessLog = iota
	// AccessOff writes no access log lines.
	AccessOff
	// AccessAll logs every request (probe and scrape paths at debug).
	AccessAll
)

// SlowRequest is the duration from which AccessErrors logs a request that
// succeeded. A waiting acquire (waitMs) that waits this long is logged too.
const SlowRequest = time.Second

// ParseAccessLog parses "off", "errors" or "all"; "" is the default
// (AccessErrors).
func ParseAccessLog(s string) (AccessLog, error) {
	switch s {
	case "", "errors":
		return AccessErrors, nil
	case "off":
		return AccessOff, nil
	case "all":
		return AccessAll, nil
	}
	return 0, fmt.Errorf("%q must be off, errors or all", s)
}

// String returns the name ParseAccessLog accepts.
func (a AccessLog) String() string {
	switch a {
	case AccessOff:
		return "off"
	case AccessAll:
		return "all"
	case AccessErrors:
		return "errors"
	}
	return fmt.Sprintf("AccessLog(%d)", int(a))
}

// logs reports whether a request that ended with status after d gets an
// access log line.
func (a AccessLog) logs(status int, d time.Duration) bool {
	switch a {
	case AccessAll:
		return true
	case AccessErrors:
		switch status {
		case 409, 428, 429:
			return false
		}
		return status >= 400 || d >= SlowRequest
	}
	return false
}

// longByDesign reports a route whose requests stay open for as long as
// their client watches (server-sent events): never "slow".
func longByDesign(route string) bool { return strings.HasSuffix(route, "/events") }

// logsGRPC is logs for a gRPC call that ended with code after d.
func (a AccessLog) logsGRPC(code codes.Code, d time.Duration) bool {
	switch a {
	case AccessAll:
		return true
	case AccessErrors:
		return code != codes.OK || d >= SlowRequest
	}
	return false
}
