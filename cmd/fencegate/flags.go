package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlagSet is every subcommand's flag set: its usage is head (the usage
// line and what the command does; "" for "usage: fencegate NAME [flags]")
// followed by the command's own flags, written to fs.Output(), which
// parseFlags points at stdout for -h and at stderr for a bad flag.
func newFlagSet(name, head string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if head == "" {
		head = "usage: fencegate " + name + " [flags]"
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), head)
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, the one way every subcommand does it:
// -h/--help prints the usage on stdout and the command exits 0; a bad
// flag prints the error and the usage on stderr and the command exits bad
// (exitUsage; lock run passes its own failure code, 125, because its other
// codes are CMD's). ok is false when the command must return code now.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, bad int) (code int, ok bool) {
	fs.SetOutput(io.Discard) // the flag package's own messages: printed below, once
	err := fs.Parse(args)
	switch {
	case err == nil:
		fs.SetOutput(stderr)
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, false
	}
	fs.SetOutput(stderr)
	fmt.Fprintf(stderr, "fencegate %s: %v\n", fs.Name(), err)
	fs.Usage()
	return bad, false
}

// isHelp reports whether arg asks for help, for the dispatchers that take
// a subcommand before any flag.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}
