package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/routes"
)

// Defaults of a route's request body bounds (Route.BodyIdleTimeout,
// Route.BodyTimeout).
const (
	// DefaultBodyIdleTimeout cuts a request whose client sends no body byte
	// for this long: a stalled upload would otherwise hold its connection,
	// its upstream connection and (on a barrier route) its barrier entry.
	DefaultBodyIdleTimeout = 30 * time.Second
	// DefaultBodyTimeout bounds the whole body of a request on a route
	// without the barrier (a barrier route's is its MaxWrite): a client
	// that trickles one byte now and then stays under any idle bound.
	DefaultBodyTimeout = 2 * time.Minute
)

// errBodyTimeout is a request body read cut by its route's bounds.
var errBodyTimeout = errors.New("proxy: request body read timed out")

// deadlineBody bounds the reads of a request body: each read must bring a
// byte within idle, and the body must end before end. The bounds are the
// connection's read deadline (http.ResponseController), set afresh before
// every read, so a read blocked on a silent client returns when they pass
// (a timer closing the body could not unblock a read in progress); the
// deadline is cleared once the body has ended, since net/http then keeps
// reading the connection in the background to notice a client that leaves,
// and that read failing would cancel the request while the upstream works.
type deadlineBody struct {
	rc       io.ReadCloser
	rc2      *http.ResponseController
	idle     time.Duration
	end      time.Time
	timedOut atomic.Bool
	now      func() time.Time
}

func newDeadlineBody(w http.ResponseWriter, rc io.ReadCloser, idle time.Duration, end time.Time) *deadlineBody {
	return &deadlineBody{rc: rc, rc2: http.NewResponseController(w), idle: idle, end: end, now: time.Now}
}

// arm sets the first deadline before anything reads the body: a request
// answered without reading its body (a denial, an early upstream answer)
// has its rest discarded by net/http under the connection's deadline.
func (b *deadlineBody) arm() error {
	dl := b.now().Add(b.idle)
	if b.end.Before(dl) {
		dl = b.end
	}
	return b.rc2.SetReadDeadline(dl)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	now := b.now()
	if !now.Before(b.end) {
		b.timedOut.Store(true)
		return 0, errBodyTimeout
	}
	dl := now.Add(b.idle)
	if b.end.Before(dl) {
		dl = b.end
	}
	if err := b.rc2.SetReadDeadline(dl); err != nil {
		// Without a deadline the read could block for ever: fail closed.
		return 0, fmt.Errorf("proxy: cannot bound the request body read: %w", err)
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		_ = b.rc2.SetReadDeadline(time.Time{})
	case err != nil && isTimeout(err):
		b.timedOut.Store(true)
		return n, fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.rc.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, errBodyTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

// bodyBounds returns an upstream entry's idle and total body bounds
// (bodyIdleTimeout, bodyTimeout) with their defaults: the total never
// beyond maxWrite on a barrier entry (the exchange is cut there anyway).
func bodyBounds(e *routes.Entry) (idle, total time.Duration) {
	idle, total = e.Config.BodyIdleTimeout.Std(), e.Config.BodyTimeout.Std()
	if idle <= 0 {
		idle = DefaultBodyIdleTimeout
	}
	if rt := e.Route; rt.Barrier {
		maxWrite := rt.EffectiveMaxWrite()
		if total <= 0 || total > maxWrite {
			total = maxWrite
		}
	} else if total <= 0 {
		total = DefaultBodyTimeout
	}
	return idle, total
}
