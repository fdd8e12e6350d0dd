package mesh

// HostScopedIstio is the generator before #26 (its rules scoped to the
// table's hosts and paths), kept so the coverage test can show it catches
// what that generator let through.
var HostScopedIstio = hostScopedIstio

// FixedReadsIstio is Istio with its read methods fixed at GET, HEAD and
// OPTIONS, whatever the entries count as writes: a broken variant.
var FixedReadsIstio = fixedReadsIstio

// Comment is the comment writer; OldComment the one before #26, which
// wrote a table's text unescaped.
var Comment, OldComment = comment, oldComment

// SetComment swaps the comment writer render uses (the broken variant of
// the manifest-parsing property); the returned func restores it.
func SetComment(f func(string) string) (restore func()) {
	old := commentFn
	commentFn = f
	return func() { commentFn = old }
}
