package order

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/resilientcheckout/checkout/internal/database/dbtest"
)

// jobRow is every river_job column that says what a job is and when it
// runs; id and created_at differ between any two inserts.
type jobRow struct {
	ID           int64
	Args         string
	Kind         string
	MaxAttempts  int16
	Metadata     string
	Priority     int16
	Queue        string
	State        string
	ScheduledAt  time.Time
	Tags         []string
	UniqueKey    []byte
	UniqueStates int32
}

func loadJob(t *testing.T, db querier, id int64) jobRow {
	t.Helper()
	var r jobRow
	err := db.QueryRow(context.Background(), `
		SELECT id, args::text, kind, max_attempts, metadata::text, priority, queue, state::text,
		       scheduled_at, tags::text[], unique_key, unique_states::integer
		FROM river_job WHERE id = $1`, id).
		Scan(&r.ID, &r.Args, &r.Kind, &r.MaxAttempts, &r.Metadata, &r.Priority, &r.Queue, &r.State,
			&r.ScheduledAt, &r.Tags, &r.UniqueKey, &r.UniqueStates)
	if err != nil {
		t.Fatalf("load job %d: %v", id, err)
	}
	r.ScheduledAt = r.ScheduledAt.UTC()
	return r
}

// The checkout flow writes the charge job's row itself (chargeJobRow) to
// keep its first write to one statement. This pins that row to the one
// River's InsertTx writes, so the worker, River UI and River's uniqueness see
// no difference — and a River upgrade that changes the row fails here.
func TestChargeJobRowMatchesInsertTx(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := context.Background()
	jobs, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o := Order{
		ID: uuid.New(), Status: StatusPending, CustomerID: "cus_1", Currency: "USD",
		PaymentMethod: "pm_card_visa", Items: []Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 500}}, Total: 500,
	}
	due := time.Now().Add(time.Hour).Truncate(time.Microsecond)

	// River's row for this order, then out of the way so ours can be written.
	var res *rivertype.JobInsertResult
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) (err error) {
		res, err = jobs.InsertTx(ctx, tx, ChargeArgs{OrderID: o.ID}, &river.InsertOpts{ScheduledAt: due})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := loadJob(t, db, res.Job.ID)
	if _, err := db.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}

	jobID, err := insertOrderWithKeyAndJob(ctx, db, &o, "job-row", make([]byte, 32), time.Minute, due)
	if err != nil {
		t.Fatal(err)
	}
	got := loadJob(t, db, jobID)
	got.ID, want.ID = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("charge job row differs from InsertTx's:\n got %+v\nwant %+v", got, want)
	}

	// River's uniqueness sees our row: inserting the order's job again (as the
	// reconciler would) finds it instead of adding a second live job.
	again, err := jobs.Insert(ctx, ChargeArgs{OrderID: o.ID}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !again.UniqueSkippedAsDuplicate || again.Job.ID != jobID {
		t.Fatalf("second insert: skipped as duplicate = %v, job %d; want true, job %d",
			again.UniqueSkippedAsDuplicate, again.Job.ID, jobID)
	}
}
