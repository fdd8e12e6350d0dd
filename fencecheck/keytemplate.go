package fencecheck

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadTemplate marks a key template the route's configuration got wrong
// (as opposed to a request path that lacks a segment).
var ErrBadTemplate = errors.New("fencecheck: bad key template")

// ExpandKey evaluates a route's key template (authz's fence_key, the
// proxy's key) against a request path. A key without braces is a literal.
// "{N}" (N ≥ 1) is replaced by the Nth segment of the path, counting from 1
// after the leading "/", percent-decoded; the query string is ignored. For "/orders/42?x=1", "orders/{2}" → "orders/42".
//
// Segments are decoded so that "/orders/%34%32" and "/orders/42" name the
// same lock: the upstream will treat them as the same resource. A missing
// or empty segment is an error (the transports answer 400 malformed); so is
// a template that does not parse (wrapping ErrBadTemplate).
//
// A path that a proxy or the upstream would normalise into another one is
// refused outright (fail closed, 400 malformed), because its segments are
// not the resource the write reaches: nginx routes "//orders/42" as
// "/orders/42" but sends the raw URI, and frameworks resolve
// "/orders/x/../42" to "/orders/42". Refused: a path not starting with "/",
// an empty segment ("//"; a trailing "/" is allowed), a "." or ".."
// segment, raw or percent-encoded ("%2e", "%2E%2e"), also before a ";"
// path parameter ("..;"), and an encoded slash ("%2F", "%2f") inside a
// segment.
func ExpandKey(template, path string) (string, error) {
	if !strings.ContainsAny(template, "{}") {
		return template, nil
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	segs, err := canonicalSegments(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rest := template; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if close := strings.IndexByte(rest, '}'); close >= 0 && (open < 0 || close < open) {
			return "", fmt.Errorf("%w: unmatched '}' in %q", ErrBadTemplate, template)
		}
		if open < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:open])
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", fmt.Errorf("%w: unclosed '{' in %q", ErrBadTemplate, template)
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil || n < 1 || rest[0] == '+' || rest[0] == '-' {
			return "", fmt.Errorf("%w: %q is not a segment number (1, 2, …) in %q", ErrBadTemplate, rest[:end], template)
		}
		rest = rest[end+1:]
		if n > len(segs) || segs[n-1] == "" {
			return "", fmt.Errorf("fencecheck: path has no segment %d for key template %q", n, template)
		}
		b.WriteString(segs[n-1])
	}
	return b.String(), nil
}

// canonicalSegments splits an origin-form path (no query) into its
// percent-decoded segments, refusing any path whose segments a normaliser
// would change (see ExpandKey). A trailing "/" yields a final empty segment.
func canonicalSegments(path string) ([]string, error) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return nil, fmt.Errorf("fencecheck: path %q does not start with '/'; refusing to expand a key template over it", path)
	}
	raw := strings.Split(rest, "/")
	segs := make([]string, len(raw))
	for i, r := range raw {
		if r == "" {
			if i == len(raw)-1 {
				continue // trailing slash
			}
			return nil, fmt.Errorf("fencecheck: path has an empty segment (\"//\") at %d; it would be normalised to another path", i+1)
		}
		if strings.Contains(r, "%2F") || strings.Contains(r, "%2f") {
			return nil, fmt.Errorf("fencecheck: path segment %d holds an encoded '/' (%%2F); it would be read as two segments", i+1)
		}
		seg, err := url.PathUnescape(r)
		if err != nil {
			return nil, fmt.Errorf("fencecheck: segment %d of the path: %w", i+1, err)
		}
		// "..;" is ".." to servlet containers, which drop path parameters.
		if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
			return nil, fmt.Errorf("fencecheck: path segment %d is a dot segment (%q); it would be normalised to another path", i+1, r)
		}
		segs[i] = seg
	}
	return segs, nil
}

// CheckPath reports whether an origin-form path (no query) is canonical in
// ExpandKey's sense: starting with "/", no empty segment but a trailing one,
// no dot segment (raw, percent-encoded, or before a ";" parameter) and no
// encoded "/". An edge that routes by path prefix refuses other paths, since
// the upstream may normalise them into a path under another route.
func CheckPath(path string) error {
	_, err := canonicalSegments(path)
	return err
}
