package routes

import (
	"net/url"
	"path"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Route matching is exact (the decoded path against the entry's path match,
// at segment boundaries), but upstream frameworks are not: ASP.NET, Express, Spring
// (optionally) and many others route case-insensitively; IIS and Windows
// file handlers drop trailing dots and spaces from a segment; some decode
// a path twice; some fold compatibility forms (fullwidth letters, "／").
// A spelling that one of them routes under /orders must not reach it
// through a catch-all route, checked under the client's own key. So the
// proxy matches each path again under each of those readings (pathFolds,
// one at a time and all together) and refuses a path for which any of them
// selects another route than the exact match (400 malformed, audited):
// such a path has no one route. A spelling that every reading routes the
// same way passes, unchanged: the proxy never rewrites the path, so an
// exact upstream sees what the check saw.
//
// Two routes whose prefixes one reading makes equal ("/Orders" and
// "/orders") are refused at start: no request could be told apart.

// pathFold is one way an upstream may read a decoded path before routing.
type pathFold struct {
	name string
	fold func(string) string
}

// Readings is how many readings Fold knows: each of pathFolds alone, and
// (the last) all of them together.
var Readings = len(pathFolds) + 1

var pathFolds = []pathFold{
	{"case-insensitive", foldCase},
	{"trailing dots and spaces trimmed", trimSegments},
	{"percent-decoded again", decodeAgain},
	{"compatibility forms folded", foldCompat},
}

// allFolds applies every reading at once, in the order a framework that
// does them all would.
func allFolds(p string) string {
	return trimSegments(foldCase(foldCompat(decodeAgain(p))))
}

// Fold returns path under reading i (len(pathFolds): all of them), as a
// clean path: "//" collapsed and dot segments resolved, since a reading
// can make them ("/orders%2F%2E%2E" decoded again, "．．" folded).
func Fold(i int, p string) string {
	if i == len(pathFolds) {
		p = allFolds(p)
	} else {
		p = pathFolds[i].fold(p)
	}
	// A backslash is a separator to some upstreams ("＼" folds to one).
	p = path.Clean("/" + strings.ReplaceAll(p, "\\", "/"))
	if p == "/" {
		return ""
	}
	return p
}

// ReadingName names reading i for logs and configuration errors.
func ReadingName(i int) string {
	if i == len(pathFolds) {
		return "all readings together"
	}
	return pathFolds[i].name
}

// foldCase maps every letter to one case the way case-insensitive routers
// compare: upper then lower, so that "ſ" (long s) and "K" (Kelvin sign),
// which upper-case to ASCII, fold with "s" and "k".
func foldCase(p string) string {
	return strings.ToLower(strings.ToUpper(p))
}

// trimSegments drops trailing dots and white space, and leading white
// space, from every segment (Windows and IIS: "orders." and "orders " are
// "orders").
func trimSegments(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = strings.TrimLeftFunc(strings.TrimRightFunc(s, func(r rune) bool { return r == '.' || unicode.IsSpace(r) }), unicode.IsSpace)
	}
	return strings.Join(segs, "/")
}

// decodeAgain percent-decodes an already decoded path once more, as an
// upstream that decodes twice would ("%252F" is "/" to it).
func decodeAgain(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// foldCompat applies NFKC: fullwidth "ｏｒｄｅｒｓ" is "orders", "／" is "/".
func foldCompat(p string) string {
	return norm.NFKC.String(p)
}

// PlainPath reports whether no reading can change p: lower-case ASCII
// letters, digits, "/", "-" and "_" only (no dot, space, "%", upper case
// or non-ASCII).
func PlainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '/' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
