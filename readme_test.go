package checkout_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// envRead matches the variable name in calls like env.Duration("DB_CONNECT_TIMEOUT", …).
var envRead = regexp.MustCompile(`\b(?:env|r)\.(?:String|Int|Float|Duration|OneOf|URL|Addr)\("([A-Z][A-Z0-9_]*)"`)

// TestReadmeListsEveryVariable keeps the README's configuration tables true:
// every variable a binary reads must appear there.
func TestReadmeListsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
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
	for _, path := range configs {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		matches := envRead.FindAllStringSubmatch(string(src), -1)
		if len(matches) == 0 {
			t.Errorf("%s: no environment variables found; has the reading code changed shape?", path)
		}
		for _, m := range matches {
			if !strings.Contains(string(readme), "`"+m[1]+"`") {
				t.Errorf("%s reads %s, which README.md does not document", path, m[1])
			}
		}
	}
}
