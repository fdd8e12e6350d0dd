package lockserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/fencegate/fencegate/lockstore"
)

// MaxBodyBytes is the request body limit (docs/api.md: over 64 KiB is 400).
const MaxBodyBytes = 64 << 10

// decodeJSON reads r's body into dst strictly: Content-Type
// application/json, at most MaxBodyBytes, one JSON value with no unknown
// fields, no wrong types and nothing after it. Every failure is an
// InvalidArgument (400): docs/api.md maps every malformed request to 400, so a
// wrong Content-Type is a 400 here too, not a 415.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	var src io.Reader = body
	var fb [3]fastField
	if fields := fastFields(dst, &fb); fields != nil {
		// A small body is read whole and tried on the strict fast path
		// (fastjson.go); whatever it does not accept, encoding/json reads
		// from the same bytes and then the rest of the body, exactly as
		// if it had read them itself.
		buf := fastBufs.Get().(*[fastBodyBytes]byte)
		defer fastBufs.Put(buf)
		n, err := io.ReadFull(body, buf[:])
		if (err == io.ErrUnexpectedEOF || err == io.EOF) && decodeFast(buf[:n], fields) {
			return nil
		}
		rest := io.Reader(body)
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			rest = errReader{err}
		}
		src = io.MultiReader(bytes.NewReader(buf[:n]), rest)
	}
	dec := json.NewDecoder(src)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return nil
	case err == nil:
		return invalidArgument("unexpected data after the JSON object")
	default:
		return decodeError(err)
	}
}

// fastBodyBytes is the largest body decodeJSON tries on the fast path: a
// lock request with a long key fits; a larger one goes to encoding/json.
const fastBodyBytes = 2048

var fastBufs = sync.Pool{New: func() any { return new([fastBodyBytes]byte) }}

// errReader replays the error that ended a read of the body.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func checkContentType(ct string) error {
	if ct == "application/json" {
		return nil // what clients send: no need to parse parameters
	}
	if ct == "" {
		return invalidArgument("Content-Type must be application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return invalidArgument("Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return invalidArgument("JSON bodies must be UTF-8")
	}
	return nil
}

// decodeError turns an encoding/json failure into a message that names the
// field and the problem, without echoing values (they may be keys).
func decodeError(err error) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return invalidArgument(fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
	case errors.Is(err, io.EOF):
		return invalidArgument("request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidArgument("request body is truncated JSON")
	case errors.As(err, &syntaxErr):
		return invalidArgument(fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset))
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return invalidArgument("request body must be a JSON object")
		}
		return invalidArgument(fmt.Sprintf("field %s must be %s, not a JSON %s", typeErr.Field, kindName(typeErr.Type), typeErr.Value))
	}
	// What is left is encoding/json's unknown-field error (it has no typed
	// form); its text names the field, which is the caller's own input.
	return &apiError{code: lockstore.InvalidArgument, msg: strings.TrimPrefix(err.Error(), "json: "), cause: err}
}

func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	}
	return "a " + t.Kind().String()
}

// query is a parsed URL query where each parameter may appear at most once.
type query url.Values

func parseQuery(r *http.Request) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalidArgument("malformed query string")
	}
	for name, vals := range v {
		if len(vals) > 1 {
			return nil, invalidArgument(fmt.Sprintf("query parameter %s given more than once", name))
		}
	}
	return query(v), nil
}

// str returns the parameter, or nil when absent.
func (q query) str(name string) *string {
	vals, ok := q[name]
	if !ok {
		return nil
	}
	return &vals[0]
}

// int64 parses an optional non-negative integer parameter, bounded by max.
func (q query) int64(name string, def, max int64) (int64, error) {
	s := q.str(name)
	if s == nil {
		return def, nil
	}
	n, err := strconv.ParseInt(*s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, invalidArgument(fmt.Sprintf("query parameter %s must be an integer in [0, %d]", name, max))
	}
	return n, nil
}
