package fenceguard_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fenceguard/pgfence"
)

// TestDocumented: docs/api.md names every exported identifier of
// fenceguard, pgfence and redisfence (types, functions, methods, constants,
// variables, struct fields), and prints pgfence.RecipeSQL verbatim, so the
// reference cannot fall behind the code.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	if !strings.Contains(text, "```sql\n"+pgfence.RecipeSQL+"```\n") {
		t.Error("docs/api.md does not print pgfence.RecipeSQL (fenceguard/pgfence/recipe.sql) verbatim in a ```sql block")
	}
	for _, dir := range []string{".", "pgfence", "redisfence"} {
		for _, name := range exportedNames(t, dir) {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(text) {
				t.Errorf("docs/api.md does not mention %s (package %s)", name, filepath.Base(filepath.Clean(dir)))
			}
		}
	}
}

func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						names = append(names, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										names = append(names, n.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	return names
}
