// Package testutil holds the helpers fencegate's tests share: a
// goroutine-safe log buffer and a logger onto it, loopback listeners and
// ports, a bounded poll (WaitFor), an in-memory span recorder, and a fake
// clock. One definition each, instead of a copy per package.
//
// It is for tests only: _test.go files and test-support packages (such as
// lockstore/storetest) import it, never a package linked into a binary
// (TestNotInBinary checks cmd/fencegate). It imports nothing of fencegate
// but tracing, so every package's tests can use it, lockstore's and the
// backends' included; the bolt opener, which needs lockstore/bolt, is the
// subpackage locktest (with the lock helpers).
package testutil
