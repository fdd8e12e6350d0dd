package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIncludeRoutesFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string // "-": no file
		entries       int
		err           string
	}{
		{"missing file: no entries", "-", 1, ""},
		{"two entries appended", "routes:\n  - name: a\n  - name: b\n", 3, ""},
		{"empty list", "routes: []\n", 1, ""},
		{"unknown field", "routes:\n  - name: a\n    keey: x\n", 0, "keey"},
		{"not YAML", "routes: [", 0, "routesFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if tc.content != "-" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c := Config{Routes: []Route{{Name: "static"}}, RoutesFile: path}
			err := c.IncludeRoutesFile()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want an error naming %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Routes) != tc.entries || c.Routes[0].Name != "static" || len(c.RoutesFileSum) != 64 {
				t.Fatalf("routes %+v, sum %q", c.Routes, c.RoutesFileSum)
			}
		})
	}
}
