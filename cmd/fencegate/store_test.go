package main

import (
	"strings"
	"testing"
)

// TestStoreURLErrorsHideThePassword: a store URL that does not parse (a
// password holding an unescaped / ? # @ is the common cause) is refused
// with a message that holds no piece of the password, on every scheme,
// as `serve` prints it.
func TestStoreURLErrorsHideThePassword(t *testing.T) {
	const pw = "Zq7?W#k/Jx@Vm"
	pieces := []string{"Zq7", "W#k", "Jx", "Vm", "?W", "k/J"}
	for _, u := range []string{
		"redis://user:" + pw + "@127.0.0.1:6379/0",
		"rediss://user:" + pw + "@127.0.0.1:6379/0",
		"redis+sentinel://user:" + pw + "@127.0.0.1:26379/0?master=m",
		"redis://127.0.0.1:6379/0?sentinel_password=" + pw,
		"postgres://user:" + pw + "@127.0.0.1:5432/db",
		"postgresql://user:" + pw + "@127.0.0.1:5432/db?sslmode=disable",
		"redis://user:Zq7W@127.0.0.1:6379/0?fenceFloor=bogus",
	} {
		_, err := parseStoreURL(u)
		if err == nil {
			continue // parsed: nothing printed
		}
		for _, p := range pieces {
			if strings.Contains(err.Error(), p) {
				t.Errorf("parseStoreURL error for a URL with a password shows %q: %v", p, err)
			}
		}
	}
}
