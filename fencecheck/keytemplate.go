package fencecheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Key-template errors. Transports branch on them: ErrBadTemplate is the
// route's configuration (logged at warn), ErrKeyPath the client's request
// (debug); both are answered 400 "malformed" without a backend read.
var (
	// ErrBadTemplate marks a fence_key template that does not parse.
	ErrBadTemplate = errors.New("fencecheck: bad fence_key template")
	// ErrKeyPath marks a request path that cannot name a key under a valid
	// template: a missing segment, or a path that is not canonical.
	ErrKeyPath = errors.New("fencecheck: path names no key")
)

// Segment types a placeholder may require ("{2:int}").
const (
	SegmentAny  = ""     // any canonical segment
	SegmentInt  = "int"  // a decimal id: 0 or [1-9][0-9]*, at most MaxIntDigits digits
	SegmentUUID = "uuid" // a lower-case 8-4-4-4-12 hexadecimal UUID
)

// MaxIntDigits bounds an "int" segment: 18 decimal digits always fit a
// signed 64-bit integer, so no upstream reads an accepted id as another
// number after overflow or rounding.
const MaxIntDigits = 18

// maxSegmentIndex bounds N in "{N}"; real templates use single digits.
const maxSegmentIndex = 255

// KeyTemplate is a parsed fence_key: literal text and placeholders that
// name path segments. Parse it with ParseKeyTemplate; it is immutable and
// safe for concurrent use.
type KeyTemplate struct {
	src   string
	parts []templatePart // empty for a literal key
}

type templatePart struct {
	lit string // literal text before the placeholder (or the trailing text when seg == 0)
	seg int    // 1-based segment index; 0 for the trailing literal
	typ string // SegmentAny, SegmentInt, SegmentUUID
}

// ParseKeyTemplate parses a route's fence_key. A key without braces is a
// literal. "{N}" (N ≥ 1, no sign or leading zero) stands for the Nth path
// segment, counting from 1 after the leading "/"; "{N:int}" and
// "{N:uuid}" also require the segment to be a canonical decimal id or a
// lower-case UUID. Two placeholders must be separated by a literal
// containing "/" (segments never contain one), unless the first is a uuid
// (fixed length) or an int followed by a non-digit: otherwise two paths
// ("/a:b/c", "/a/b:c" under "{1}:{2}") would name one key. Errors wrap
// ErrBadTemplate.
func ParseKeyTemplate(src string) (*KeyTemplate, error) {
	t := &KeyTemplate{src: src}
	if !strings.ContainsAny(src, "{}") {
		return t, nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s", ErrBadTemplate, src, fmt.Sprintf(format, a...))
	}
	for rest := src; ; {
		open := strings.IndexByte(rest, '{')
		if cl := strings.IndexByte(rest, '}'); cl >= 0 && (open < 0 || cl < open) {
			return nil, bad("unmatched '}'")
		}
		if open < 0 {
			t.parts = append(t.parts, templatePart{lit: rest})
			break
		}
		lit := rest[:open]
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return nil, bad("unclosed '{'")
		}
		idx, typ, _ := strings.Cut(rest[:end], ":")
		rest = rest[end+1:]
		n, err := strconv.Atoi(idx)
		if err != nil || n < 1 || n > maxSegmentIndex || idx[0] < '1' || idx[0] > '9' {
			return nil, bad("%q is not a segment number (1, 2, …)", idx)
		}
		switch typ {
		case SegmentAny, SegmentInt, SegmentUUID:
		default:
			return nil, bad("unknown segment type %q (want int or uuid)", typ)
		}
		if len(t.parts) > 0 {
			prev := t.parts[len(t.parts)-1]
			ok := strings.Contains(lit, "/") || prev.typ == SegmentUUID ||
				(prev.typ == SegmentInt && lit != "" && (lit[0] < '0' || lit[0] > '9'))
			if !ok {
				return nil, bad("placeholders {%d} and {%d} are not separated by '/': two paths could name one key", prev.seg, n)
			}
		}
		t.parts = append(t.parts, templatePart{lit: lit, seg: n, typ: typ})
	}
	return t, nil
}

// String returns the template as written.
func (t *KeyTemplate) String() string { return t.src }

// Literal reports whether the template names one key whatever the path.
func (t *KeyTemplate) Literal() bool { return len(t.parts) == 0 }

// Expand returns the key the template names for path, an origin-form
// request target whose query and fragment are ignored. A literal template
// returns itself without reading the path.
//
// The path must be canonical, or it is refused (an error wrapping
// ErrKeyPath; the transports answer 400 "malformed" without a backend
// read): one resource must name one lock, so every spelling an upstream
// would read as the same resource but the template would expand to
// another key ("/orders/042", "/orders/%2B42", "/orders/４２",
// "/orders/42;v=1") is refused rather than locked separately. The rules,
// listed in README.md ("Key templates"):
//
// Whole path: starts with "/"; no ";" (servlet containers drop matrix
// parameters); no "\" (some servers read it as "/"); no empty segment
// ("//"; one trailing "/" is allowed); no "." or ".." segment, raw or
// percent-encoded; no "%2F" inside a segment; valid percent-encoding.
//
// Each segment a placeholder names, before decoding: only RFC 3986 pchar
// characters, and a percent-escape only where one is needed ("%2B" for
// "+" and "%34" for "4" are refused; "%20" and "%C3%A9" are fine, hex in
// either case). After decoding once: valid UTF-8, not empty, in NFC and in
// NFKC (fullwidth and compatibility forms are refused), no decimal digit
// outside ASCII ("٤"), no control or invisible format character, no "\".
// "{N:int}": 0 or [1-9][0-9]* (no sign, no leading zero), at most
// MaxIntDigits digits. "{N:uuid}": lower-case 8-4-4-4-12 hex.
func (t *KeyTemplate) Expand(path string) (string, error) {
	if t.Literal() {
		return t.src, nil
	}
	vals, err := t.values(path, rules{})
	if err != nil {
		return "", err
	}
	return t.join(vals), nil
}

// join builds the key from the placeholders' decoded values.
func (t *KeyTemplate) join(vals []string) string {
	var b strings.Builder
	for i, p := range t.parts {
		b.WriteString(p.lit)
		if p.seg > 0 {
			b.WriteString(vals[i])
		}
	}
	return b.String()
}

// ExpandKey parses template and expands it against path: the simple entry
// point for a template that arrives with each request (Envoy
// context_extensions, forward-auth query). See ParseKeyTemplate and
// KeyTemplate.Expand.
func ExpandKey(template, path string) (string, error) {
	t, err := ParseKeyTemplate(template)
	if err != nil {
		return "", err
	}
	return t.Expand(path)
}

// rules switch individual canonical-form checks off, only so the tests can
// prove each check is what catches its inputs. The zero value checks
// everything; production code never sets a field.
type rules struct {
	skipMatrix, skipEncoding, skipUnicode, skipType bool
}

// values returns, for each part, the decoded value of the segment its
// placeholder names ("" for the trailing literal).
func (t *KeyTemplate) values(path string, r rules) ([]string, error) {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrKeyPath, fmt.Sprintf(format, a...))
	}
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return nil, refuse("path does not start with '/'")
	}
	if !r.skipMatrix && strings.IndexByte(rest, ';') >= 0 {
		return nil, refuse("path holds ';' (a matrix parameter some upstreams drop)")
	}
	if strings.IndexByte(rest, '\\') >= 0 {
		return nil, refuse("path holds '\\' (some upstreams read it as '/')")
	}
	raw := strings.Split(rest, "/")
	for i, s := range raw {
		if s == "" {
			if i == len(raw)-1 {
				continue // trailing slash
			}
			return nil, refuse("empty segment (\"//\") at %d; it would be normalised to another path", i+1)
		}
		if strings.Contains(s, "%2F") || strings.Contains(s, "%2f") {
			return nil, refuse("segment %d holds an encoded '/' (%%2F); it would be read as two segments", i+1)
		}
		dec, err := unescape(s)
		if err != nil {
			return nil, refuse("segment %d: %v", i+1, err)
		}
		if strings.IndexByte(dec, '\\') >= 0 {
			// "%5C": an upstream that decodes it and reads '\' as '/'
			// would see another path (and maybe another route).
			return nil, refuse("segment %d holds an encoded '\\' (%%5C); some upstreams read it as '/'", i+1)
		}
		// "..;" is ".." to servlet containers (and refused above for its ';').
		if name, _, _ := strings.Cut(dec, ";"); name == "." || name == ".." {
			return nil, refuse("segment %d is a dot segment; it would be normalised to another path", i+1)
		}
	}
	vals := make([]string, len(t.parts))
	for i, p := range t.parts {
		if p.seg == 0 {
			continue
		}
		if p.seg > len(raw) || raw[p.seg-1] == "" {
			return nil, refuse("path has no segment %d", p.seg)
		}
		v, err := canonicalSegment(raw[p.seg-1], p.typ, r)
		if err != nil {
			return nil, refuse("segment %d: %v", p.seg, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// canonicalSegment decodes one templated segment, refusing it unless it is
// the only spelling of its value (see Expand).
func canonicalSegment(s, typ string, r rules) (string, error) {
	v, err := unescape(s)
	if err != nil {
		return "", err
	}
	if !r.skipEncoding {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '%' {
				// unescape has checked the two hex digits.
				if b := unhex(s[i+1])<<4 | unhex(s[i+2]); isPchar(b) {
					return "", fmt.Errorf("%q is percent-encoded but needs no encoding", rune(b))
				}
				i += 2
				continue
			}
			if !isPchar(c) {
				return "", fmt.Errorf("byte %#02x must be percent-encoded", c)
			}
		}
	}
	if !r.skipMatrix && strings.IndexByte(v, ';') >= 0 {
		// "%3B": a framework that decodes before dropping path parameters
		// would cut the value here.
		return "", errors.New("holds an encoded ';'")
	}
	if !utf8.ValidString(v) {
		return "", errors.New("decodes to invalid UTF-8")
	}
	if !r.skipUnicode {
		for _, c := range v {
			switch {
			case c == '\\':
				return "", errors.New("holds '\\'")
			case unicode.IsControl(c) || unicode.Is(unicode.Cf, c):
				return "", fmt.Errorf("holds the control or format character %U", c)
			case c > unicode.MaxASCII && unicode.Is(unicode.Nd, c):
				return "", fmt.Errorf("holds the non-ASCII digit %U, which some upstreams read as an ASCII digit", c)
			}
		}
		if !norm.NFC.IsNormalString(v) || !norm.NFKC.IsNormalString(v) {
			return "", errors.New("is not in NFC and NFKC (a compatibility or fullwidth form, or decomposed)")
		}
	}
	if !r.skipType {
		switch typ {
		case SegmentInt:
			if !canonicalInt(v) {
				return "", fmt.Errorf("is not a canonical int (0 or [1-9][0-9]*, at most %d digits)", MaxIntDigits)
			}
		case SegmentUUID:
			if !canonicalUUID(v) {
				return "", errors.New("is not a lower-case UUID")
			}
		}
	}
	return v, nil
}

// EncodeSegment returns the canonical spelling of a segment value: every
// byte that is not an RFC 3986 pchar (or is ';') percent-encoded with
// upper-case hex, nothing else encoded. A segment Expand accepts is its
// value's EncodeSegment, up to the case of hex digits.
func EncodeSegment(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if isPchar(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// isPchar reports whether c may appear unencoded in a canonical segment:
// RFC 3986 pchar (unreserved, sub-delims, ':' and '@') except ';', which
// is refused in template paths whether raw or encoded.
func isPchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0
}

// unescape percent-decodes s once, refusing a '%' not followed by two hex
// digits. Unlike url.PathUnescape it takes every other byte as it is, so
// the checks above see the raw input.
func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
			return "", errors.New("invalid percent-escape")
		}
		b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
		i += 2
	}
	return string(b), nil
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

func canonicalInt(v string) bool {
	if v == "" || len(v) > MaxIntDigits || (v[0] == '0' && len(v) > 1) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

func canonicalUUID(v string) bool {
	if len(v) != 36 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// CheckPath reports whether an origin-form path (no query) passes the path
// rules every key template applies before it looks at a segment: it starts
// with "/", has no empty segment but a trailing one, no dot segment, no
// encoded "/", no ";" (a matrix parameter some upstreams drop) and no "\".
// An edge that routes by path prefix refuses other paths, since the
// upstream may normalise them into a path under another route. The error
// wraps ErrKeyPath.
func CheckPath(path string) error {
	_, err := (&KeyTemplate{}).values(path, rules{})
	return err
}
