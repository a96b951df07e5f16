package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/resilientcheckout/checkout/internal/fleet"
	"github.com/resilientcheckout/checkout/internal/payment"
)

// sharedBreakers names the dependencies whose breakers the binaries share
// through the fleet (serve.go here and cmd/worker/serve.go join them), the
// only names open and clear accept. A row for any other name would be read
// by no process: "forced open" would be printed while every process kept
// calling the dependency the operator meant, and a mistyped clear would
// leave the real one forced.
var sharedBreakers = []string{payment.Dependency}

const breakerUsage = `usage:
  checkout breaker open DEPENDENCY [--for DURATION]   force it open (no DURATION: until cleared)
  checkout breaker clear DEPENDENCY                   give it back to each process's breaker
  checkout breaker status                             every dependency's shared state`

// breaker is the operator's switch for the fleet's shared circuit breakers
// (internal/fleet). It talks to Postgres only, so it works from any replica
// or a one-off container with DATABASE_URL; the database credential is
// the switch's credential (docs/design.md, "Invariants").
func breaker(ctx context.Context, cfg config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, breakerUsage)
		return errors.New("breaker: missing command")
	}
	// Checked before connecting, so a typo is refused the same way whether
	// or not the database is reachable, and nothing is written.
	if cmd := args[0]; (cmd == "open" || cmd == "clear") && len(args) >= 2 && !slices.Contains(sharedBreakers, args[1]) {
		return fmt.Errorf("breaker %s: unknown dependency %q (known: %s)", cmd, args[1], strings.Join(sharedBreakers, ", "))
	}
	ctx, pool, done, err := operatorDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()

	switch cmd := args[0]; {
	case cmd == "status" && len(args) == 1:
		states, err := fleet.Statuses(ctx, pool)
		if err != nil {
			return err
		}
		return printStatuses(stdout, states)
	case (cmd == "open" || cmd == "clear") && len(args) >= 2:
		dependency := args[1]
		fs := flag.NewFlagSet("breaker "+cmd, flag.ContinueOnError)
		fs.SetOutput(stderr)
		var d time.Duration
		if cmd == "open" {
			fs.DurationVar(&d, "for", 0, "how long to force it open (0: until cleared)")
		}
		if err := fs.Parse(args[2:]); err != nil {
			return fmt.Errorf("breaker %s: %w", cmd, err)
		}
		if fs.NArg() > 0 || d < 0 {
			fmt.Fprintln(stderr, breakerUsage)
			return fmt.Errorf("breaker %s: unexpected arguments %q", cmd, fs.Args())
		}
		if cmd == "open" {
			if err := fleet.Force(ctx, pool, dependency, d, operator()); err != nil {
				return err
			}
			until := "until cleared"
			if d > 0 {
				until = "for " + d.String()
			}
			fmt.Fprintf(stdout, "%s forced open %s: every process refuses its calls\n", dependency, until)
			return nil
		}
		if _, err := fleet.Clear(ctx, pool, dependency, operator()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s cleared: each process's own breaker decides\n", dependency)
		return nil
	}
	fmt.Fprintln(stderr, breakerUsage)
	return fmt.Errorf("breaker: unknown command %q", args)
}

func printStatuses(w io.Writer, states []fleet.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPENDENCY\tSTATE\tLEFT\tFAILED PROBES\tPROBE HOLDER\tSOURCE\tUPDATED")
	for _, s := range states {
		left := "-"
		switch {
		case s.UntilCleared:
			left = "until cleared"
		case s.Left > 0:
			left = s.Left.Round(time.Second).String()
		}
		holder := s.ProbeHolder
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Dependency, s.State, left, s.FailedProbes, holder, s.Source, s.UpdatedAt.UTC().Format(time.RFC3339))
	}
	if len(states) == 0 {
		fmt.Fprintln(tw, "(none: every breaker decides locally)")
	}
	return tw.Flush()
}

// operator names who flipped the switch, for the row's source and the logs.
func operator() string {
	name := "operator"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "operator:" + name + "@" + host
}
