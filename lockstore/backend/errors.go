package backend

import (
	"context"
	"errors"

	"github.com/fencegate/fencegate/lockstore"
)

// MapError turns the error of a failed backend call into the contract's,
// the same way on every backend:
//
//   - nil stays nil;
//   - an *Error built inside the operation (e.g. FenceOverflow) passes
//     through unchanged;
//   - once ctx is done, the failure is its cancellation or deadline
//     (ContextError, with err kept as the cause), whatever words the
//     driver used for it;
//   - anything else is driver(err), the backend's mapping of its client's
//     errors; MapError fills in the Op when driver leaves it empty.
func MapError(ctx context.Context, op string, err error, driver func(error) *lockstore.Error) error {
	if err == nil {
		return nil
	}
	var le *lockstore.Error
	if errors.As(err, &le) {
		return err
	}
	if ce := lockstore.ContextError(ctx, op); ce != nil {
		ce.Err = err
		return ce
	}
	e := driver(err)
	if e.Op == "" {
		e.Op = op
	}
	return e
}
