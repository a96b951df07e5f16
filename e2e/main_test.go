// Package e2e tests the real binaries as separate processes — checkout,
// worker and paymentsim talking HTTP to each other and to a real
// PostgreSQL — against docs/design.md, "Invariants". It has only tests.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/resilientcheckout/checkout/internal/lab/process"
)

// bin holds the binaries built once for all tests of the package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "checkout-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := process.Build("..", dir, "./cmd/checkout", "./cmd/worker", "./cmd/paymentsim", "./cmd/catalogsim"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func binary(name string) string { return filepath.Join(bin, name) }
