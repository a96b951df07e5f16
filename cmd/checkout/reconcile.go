package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/ledger"
)

// reconcile lists what the worker's ledger reconciliation found: provider
// charges that no paid order accounts for (internal/ledger), newest first.
// The kinds no_order, order_failed and second_charge are for a person to
// decide: refund the customer, or fulfil the order by hand. settled_paid
// was resolved by the walk itself. Like `checkout breaker` it reads
// Postgres only, so it runs from any replica or a one-off container.
func reconcile(ctx context.Context, cfg config, stdout io.Writer) error {
	ctx, pool, done, err := operatorDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	found, err := ledger.Findings(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCHARGE\tREFERENCE\tAMOUNT\tORDER STATUS\tCHARGED AT\tFOUND AT")
	for _, f := range found {
		status := f.OrderStatus
		if status == "" {
			status = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d %s\t%s\t%s\t%s\n", f.Kind, f.ChargeID, f.Reference, f.Amount, f.Currency, status,
			f.ChargedAt.UTC().Format(time.RFC3339), f.FoundAt.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(found) == 0 {
		fmt.Fprintln(stdout, "no findings: every provider charge walked so far is accounted for by a paid order")
	}
	return nil
}

// operatorDatabase opens the database for a one-off operator command
// (breaker, reconcile), which gives up after 10 s; done releases both.
func operatorDatabase(ctx context.Context, cfg config) (context.Context, *pgxpool.Pool, func(), error) {
	pool, err := database.Open(ctx, cfg.Database)
	if err != nil {
		return ctx, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	return ctx, pool, func() { cancel(); pool.Close() }, nil
}
