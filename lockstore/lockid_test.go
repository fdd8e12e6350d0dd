package lockstore

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

var lockIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)

func TestNewLockID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := NewLockID()
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateLockID(id); err != nil {
			t.Fatalf("NewLockID produced an invalid id: %v", err)
		}
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(b) != 16 {
			t.Fatalf("id does not decode to 16 bytes: %d, %v", len(b), err)
		}
		if seen[id] {
			t.Fatal("duplicate lockId in 1000 draws")
		}
		seen[id] = true
	}
}

func TestValidateLockID(t *testing.T) {
	good := "AAAAAAAAAAAAAAAAAAAAAA"
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"valid", good, true},
		{"all classes", "azAZ09_-azAZ09_-azAZ09", true},
		{"empty", "", false},
		{"21 chars", good[:21], false},
		{"23 chars", good + "A", false},
		{"plus", "+" + good[1:], false},
		{"slash", good[:21] + "/", false},
		{"padding", good[:20] + "==", false},
		{"space", good[:10] + " " + good[11:], false},
		{"tab", "\t" + good[1:], false},
		{"trailing newline", good[:21] + "\n", false},
		{"NUL", good[:21] + "\x00", false},
		// Cyrillic 'а' (U+0430) looks like 'a' and is two bytes: in place of
		// two ASCII letters the byte length is still 22.
		{"cyrillic look-alike, 22 bytes", strings.Repeat("a", 20) + "\u0430", false},
		{"cyrillic look-alike, 23 bytes", strings.Repeat("a", 21) + "\u0430", false},
		{"fullwidth A", strings.Repeat("a", 19) + "\uff21", false},
		{"dot", good[:21] + ".", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateLockID(tt.id)
			if tt.ok != (err == nil) {
				t.Fatalf("ValidateLockID(%q) = %v, want ok=%v", tt.id, err, tt.ok)
			}
			if err != nil {
				if CodeOf(err) != InvalidArgument {
					t.Errorf("code %s, want InvalidArgument", CodeOf(err))
				}
				if tt.id != "" && strings.Contains(err.Error(), tt.id) {
					t.Errorf("error echoes the lockId: %v", err)
				}
			}
		})
	}
}

// FuzzValidateLockID checks that ValidateLockID accepts exactly
// ^[A-Za-z0-9_-]{22}$.
func FuzzValidateLockID(f *testing.F) {
	for _, s := range []string{"AAAAAAAAAAAAAAAAAAAAAA", "azAZ09_-azAZ09_-azAZ09", "", "+/=", strings.Repeat("a", 20) + "\u0430",
		"AAAAAAAAAAAAAAAAAAAAA\n", strings.Repeat("_", 23)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateLockID(id)
		if want := lockIDPattern.MatchString(id); want != (err == nil) {
			t.Fatalf("ValidateLockID(%q) = %v, regex says %v", id, err, want)
		}
		if err != nil && CodeOf(err) != InvalidArgument {
			t.Fatalf("code %s", CodeOf(err))
		}
	})
}
