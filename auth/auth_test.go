package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/auth"
)

func TestParseTokenHash(t *testing.T) {
	sum := sha256.Sum256([]byte("s3cret"))
	good := hex.EncodeToString(sum[:])
	if h, err := auth.ParseTokenHash(good); err != nil || h != sum {
		t.Errorf("ParseTokenHash(%s) = %x, %v", good, h, err)
	}
	if h, err := auth.ParseTokenHash(strings.ToUpper(good) + "\n"); err != nil || h != sum {
		t.Errorf("upper case with newline: %x, %v", h, err)
	}
	for _, bad := range []string{"", "zz", good[:62], good + "00"} {
		if _, err := auth.ParseTokenHash(bad); err == nil {
			t.Errorf("ParseTokenHash(%q) accepted", bad)
		}
	}
}

func TestNewAuthenticatorRejects(t *testing.T) {
	h := auth.HashToken("a")
	cases := []struct {
		name   string
		tokens []auth.Token
		want   string
	}{
		{"empty name", []auth.Token{{SHA256: h}}, "name is empty"},
		{"duplicate name", []auth.Token{{Name: "x", SHA256: h}, {Name: "x", SHA256: auth.HashToken("b")}}, "duplicate name"},
		{"duplicate secret", []auth.Token{{Name: "x", SHA256: h}, {Name: "y", SHA256: h}}, "same secret"},
		{"no digest", []auth.Token{{Name: "x"}}, "sha256 is not set"},
		{"unknown operation", []auth.Token{{Name: "x", SHA256: h, Operations: []string{"acquire", "steal"}}}, `unknown operation "steal"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := auth.NewAuthenticator(c.tokens)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
	t.Run("every problem is listed", func(t *testing.T) {
		_, err := auth.NewAuthenticator([]auth.Token{{}, {Name: "y", SHA256: h, Operations: []string{"nope"}}})
		if err == nil || !strings.Contains(err.Error(), "name is empty") || !strings.Contains(err.Error(), "nope") {
			t.Errorf("error %v", err)
		}
	})
}

func TestAuthenticate(t *testing.T) {
	a, err := auth.NewAuthenticator([]auth.Token{
		{Name: "default", SHA256: auth.HashToken("t-default")},
		{Name: "star", SHA256: auth.HashToken("t-star"), Prefixes: []string{"x/", "*"}, Operations: []string{"*"}},
		// The prefix is given decomposed (e + combining acute); keys are
		// compared after NFC, so it must match the composed form.
		{Name: "cafe", SHA256: auth.HashToken("t-cafe"), Prefixes: []string{"cafe\u0301/"}, Operations: []string{"Acquire", " status "}},
	})
	if err != nil {
		t.Fatal(err)
	}
	headers := []struct {
		header string
		name   string
		err    error
	}{
		{"Bearer t-default", "default", nil},
		{"bearer t-star", "star", nil},
		{"BEARER   t-cafe  ", "cafe", nil},
		{"", "", auth.ErrNoToken},
		{"Bearer ", "", auth.ErrNoToken},
		{"Basic dC1kZWZhdWx0", "", auth.ErrNoToken},
		{"t-default", "", auth.ErrNoToken},
		{"Bearer t-defaul", "", auth.ErrInvalidToken},
		{"Bearer t-default2", "", auth.ErrInvalidToken},
	}
	for _, h := range headers {
		p, err := a.Authenticate(h.header)
		if !errors.Is(err, h.err) {
			t.Errorf("Authenticate(%q) error %v, want %v", h.header, err, h.err)
			continue
		}
		if err == nil && p.Name != h.name {
			t.Errorf("Authenticate(%q) = %q, want %q", h.header, p.Name, h.name)
		}
	}

	scopes := []struct {
		token   string
		op      auth.Operation
		key     string
		canDo   bool
		canKey  bool
		allKeys bool
	}{
		{"t-default", auth.OpAcquire, "anything", true, true, true},
		{"t-default", auth.OpStatus, "anything", true, true, true},
		{"t-default", auth.OpAudit, "anything", false, true, true},
		{"t-star", auth.OpAudit, "y/1", true, true, true},
		{"t-default", auth.OpUI, "anything", false, true, true},
		{"t-star", auth.OpUI, "y/1", true, true, true},
		{"t-default", auth.OpCheck, "anything", false, true, true},
		{"t-star", auth.OpCheck, "y/1", true, true, true},
		{"t-cafe", auth.OpAcquire, "caf\u00e9/1", true, true, false},
		{"t-cafe", auth.OpStatus, "cafe/1", true, false, false},
		{"t-cafe", auth.OpRelease, "caf\u00e9/1", false, true, false},
	}
	for _, s := range scopes {
		p, err := a.Authenticate("Bearer " + s.token)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.CanDo(s.op); got != s.canDo {
			t.Errorf("%s CanDo(%s) = %v", p.Name, s.op, got)
		}
		if got := p.CanUseKey(s.key); got != s.canKey {
			t.Errorf("%s CanUseKey(%q) = %v", p.Name, s.key, got)
		}
		if got := p.CanUseAllKeys(); got != s.allKeys {
			t.Errorf("%s CanUseAllKeys = %v", p.Name, got)
		}
	}
}

// BenchmarkAuthenticate shows the cost of checking a token against a
// realistic token list (every digest is compared, by design).
func BenchmarkAuthenticate(b *testing.B) {
	var tokens []auth.Token
	for i := range 50 {
		tokens = append(tokens, auth.Token{Name: string(rune('a'+i%26)) + strings.Repeat("x", i), SHA256: auth.HashToken(strings.Repeat("t", i+1))})
	}
	a, err := auth.NewAuthenticator(tokens)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := a.Authenticate("Bearer ttttt"); err != nil {
			b.Fatal(err)
		}
	}
}
