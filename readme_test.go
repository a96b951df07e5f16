package checkout_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// envRead matches the variable name in calls like env.Duration("DB_CONNECT_TIMEOUT", …)
// or r.OptionalURL("FLEET_LISTEN_DATABASE_URL", …).
var envRead = regexp.MustCompile(`\b(?:env|r)\.(?:String|Int|Float|Duration|OneOf|URL|Addr|OptionalURL|OptionalAddr)\("([A-Z][A-Z0-9_]*)"`)

// configDoc is the page whose tables list every environment variable.
const configDoc = "docs/operations.md"

// TestReadmeListsEveryVariable keeps the configuration tables in
// docs/operations.md ("Configuration") true: every variable a binary reads
// must appear there, in backquotes.
func TestReadmeListsEveryVariable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.FromSlash(configDoc))
	if err != nil {
		t.Fatal(err)
	}
	configs, err := filepath.Glob("cmd/*/config.go")
	if err != nil || len(configs) == 0 {
		t.Fatalf("no cmd/*/config.go found (%v)", err)
	}
	// Settings several binaries share are read by envconfig itself.
	shared, err := filepath.Glob("internal/envconfig/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range shared {
		if !strings.HasSuffix(path, "_test.go") && path != filepath.Join("internal", "envconfig", "envconfig.go") {
			configs = append(configs, path)
		}
	}
	// The simulators' wiring may read its settings outside cmd/; those files
	// count when they read any.
	optional, err := filepath.Glob("internal/sim/simulator/*.go")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	check := func(path string, required bool) {
		t.Helper()
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		matches := envRead.FindAllStringSubmatch(string(src), -1)
		if len(matches) == 0 && required {
			t.Errorf("%s: no environment variables found; has the reading code changed shape?", path)
		}
		for _, m := range matches {
			read++
			if !strings.Contains(string(doc), "`"+m[1]+"`") {
				t.Errorf("%s reads %s, which %s does not document", path, m[1], configDoc)
			}
		}
	}
	for _, path := range configs {
		check(path, true)
	}
	for _, path := range optional {
		if !strings.HasSuffix(path, "_test.go") {
			check(path, false)
		}
	}
	if read == 0 {
		t.Fatal("no environment variable reads found at all")
	}
}
