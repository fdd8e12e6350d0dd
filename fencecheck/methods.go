package fencecheck

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// MethodSet says which HTTP methods are writes. The zero value is the
// default set: every method but GET, HEAD and OPTIONS, exactly as spelled
// (methods are case-sensitive, RFC 9110 §9.1, so "get" is a write).
type MethodSet struct {
	all    bool            // "*": every method is a write
	listed map[string]bool // explicit write methods; nil means the default
}

// DefaultWriteMethodsSpec describes the default set, for docs and errors.
const DefaultWriteMethodsSpec = "everything but GET, HEAD, OPTIONS"

// StandardMethods are the methods a write-method spec may name without
// opting in: RFC 9110's (GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS,
// TRACE) and RFC 5789's PATCH.
var StandardMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch}

// CustomMethodPrefix opts one method name out of the standard-method check
// in a write-method spec: "POST,+PROPFIND,+MKCOL".
const CustomMethodPrefix = "+"

// WriteMethods parses a route's write-method spec: a comma- or
// space-separated list of methods ("POST,PUT,PATCH,DELETE"), "*" for every
// method, or "" for the default (everything but GET, HEAD and OPTIONS).
// Listed methods are matched case-insensitively (a listed write method in
// any case is still a write); the default set's reads are only the exact
// upper-case GET, HEAD and OPTIONS.
//
// A listed name must be one of StandardMethods (in any case), or carry the
// explicit opt-in prefix "+" ("+PROPFIND") and be an HTTP method token: a
// typo ("PUTT", "bogus method!") is an error, never a method that silently
// leaves PUT out of the set. Transports fail closed on the error (503
// "unavailable"); configuration that names methods refuses to start.
func WriteMethods(spec string) (MethodSet, error) {
	return parseWriteMethods(spec, false)
}

// parseWriteMethods is WriteMethods; anyToken (tests only) drops the
// standard-method check, so a test can show its table catches that.
func parseWriteMethods(spec string, anyToken bool) (MethodSet, error) {
	fields := strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	if len(fields) == 0 {
		if strings.TrimSpace(spec) != "" || strings.Contains(spec, ",") {
			// "," alone names nothing: the operator meant a list.
			return MethodSet{}, fmt.Errorf("fencecheck: write methods %q name no method", spec)
		}
		return MethodSet{}, nil
	}
	ms := MethodSet{listed: make(map[string]bool, len(fields))}
	for _, f := range fields {
		if f == "*" {
			ms.all = true
			continue
		}
		name, custom := strings.CutPrefix(f, CustomMethodPrefix)
		if !isToken(name) {
			return MethodSet{}, fmt.Errorf("fencecheck: write methods %q: %q is not an HTTP method", spec, f)
		}
		up := strings.ToUpper(name)
		if !custom && !anyToken && !slices.Contains(StandardMethods, up) {
			return MethodSet{}, fmt.Errorf("fencecheck: write methods %q: %q is not a standard method "+
				"(%s); write %s%s to name a custom method", spec, f, strings.Join(StandardMethods, ", "), CustomMethodPrefix, name)
		}
		ms.listed[up] = true
	}
	return ms, nil
}

// IsWrite reports whether method is a write under the set.
func (ms MethodSet) IsWrite(method string) bool {
	if ms.all {
		return true
	}
	if ms.listed == nil {
		// Exact match on purpose: an upstream may route "get" (or "Get") as
		// something other than a read, so anything that is not exactly a
		// read method is checked as a write. Fail closed.
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return false
		}
		return true
	}
	return ms.listed[strings.ToUpper(method)]
}

// String renders the set in the form WriteMethods parses.
func (ms MethodSet) String() string {
	if ms.all {
		return "*"
	}
	if ms.listed == nil {
		return ""
	}
	out := make([]string, 0, len(ms.listed))
	for m := range ms.listed {
		if !slices.Contains(StandardMethods, m) {
			m = CustomMethodPrefix + m
		}
		out = append(out, m)
	}
	slices.Sort(out) // stable output for logs and tests
	return strings.Join(out, ",")
}

// isToken reports whether s is an RFC 9110 token (what a method must be).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
