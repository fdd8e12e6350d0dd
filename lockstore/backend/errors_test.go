package backend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockstore"
)

// TestMapError: nil stays nil, our own errors pass through, a done context
// decides over the driver, and the driver maps the rest with the Op filled.
func TestMapError(t *testing.T) {
	driverCalls := 0
	driver := func(err error) *lockstore.Error {
		driverCalls++
		return &lockstore.Error{Code: lockstore.ServiceUnavailable, Msg: "driver says so", Err: err}
	}
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancel2()
	cause := errors.New("connection reset")

	if err := MapError(cancelled, "acquire", nil, driver); err != nil {
		t.Errorf("MapError(nil) = %v", err)
	}
	own := FenceOverflow("acquire", "k")
	if err := MapError(cancelled, "acquire", own, driver); err != own {
		t.Errorf("MapError(*Error) = %v, want it unchanged", err)
	}
	if err := MapError(cancelled, "acquire", cause, driver); lockstore.CodeOf(err) != lockstore.Aborted || !errors.Is(err, cause) {
		t.Errorf("MapError(cancelled ctx) = %v, want Aborted wrapping the cause", err)
	}
	if err := MapError(expired, "acquire", cause, driver); lockstore.CodeOf(err) != lockstore.NetworkTimeout || !errors.Is(err, cause) {
		t.Errorf("MapError(expired ctx) = %v, want NetworkTimeout wrapping the cause", err)
	}
	if driverCalls != 0 {
		t.Errorf("driver consulted %d times while the context decided", driverCalls)
	}
	err := MapError(live, "release", cause, driver)
	var le *lockstore.Error
	if !errors.As(err, &le) || le.Code != lockstore.ServiceUnavailable || le.Op != "release" || !errors.Is(err, cause) {
		t.Errorf("MapError(live ctx) = %+v, want the driver's error with Op release", err)
	}
}

// TestKitIsBadInput: the kit's validators refuse input as bad input, and
// its sweep limit (a caller's programming fault) is not.
func TestKitIsBadInput(t *testing.T) {
	_, maxErr := ValidateAdmission(lockstore.WriteAdmission{Fence: "000000000000001", WriteID: "AAAAAAAAAAAAAAAAAAAAAA"})
	for name, err := range map[string]error{
		"writeId":  ValidateWriteID("?"),
		"maxWrite": maxErr,
	} {
		if !lockstore.IsBadInput(err) {
			t.Errorf("%s: IsBadInput(%v) = false", name, err)
		}
	}
	if err := ValidateSweepLimit(0); err == nil || lockstore.IsBadInput(err) {
		t.Errorf("ValidateSweepLimit(0) = %v; want an error that is not bad input", err)
	}
}
