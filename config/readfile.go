package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxFileSize bounds the config file (4 MiB). A route table of 8,000
// entries is about 1.5 MiB; the file is read whole, at start and on every
// reload, so its size is what one slip (a log file, a device) could cost
// in memory.
const MaxFileSize = 4 << 20

// ErrNotRegular: the config path (after symlinks) is not a regular file: a
// FIFO, socket or device, whose read could block for ever or never end.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: the config file is larger than MaxFileSize.
var ErrTooLarge = fmt.Errorf("larger than %d bytes", MaxFileSize)

// ReadFile reads the config file at path, bounded: it refuses what is not
// a regular file without blocking on it (the open is non-blocking, so a
// FIFO that a ConfigMap-style symlink swap put there is refused rather
// than waited on for a writer), and a file over MaxFileSize.
func ReadFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, st.Mode().Type())
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	// The size may change under us: read at most one byte past the cap.
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return b, nil
}
