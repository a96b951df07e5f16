package telemetry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestErrorLogLimitsRate: a trace backend that is gone fails every batch;
// the log gets one line per interval, saying how many errors it skipped.
func TestErrorLogLimitsRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		e := newErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
		for range 3 {
			e.Handle(errors.New("export failed"))
			time.Sleep(5 * time.Second) // the batch processor's default interval
		}
		if n := strings.Count(buf.String(), "export failed"); n != 1 {
			t.Fatalf("%d lines within the interval, want 1:\n%s", n, buf.String())
		}
		time.Sleep(time.Minute)
		e.Handle(errors.New("export failed"))
		if n := strings.Count(buf.String(), "export failed"); n != 2 {
			t.Fatalf("%d lines after the interval, want 2:\n%s", n, buf.String())
		}
		if !strings.Contains(buf.String(), "errors_not_logged=2") {
			t.Errorf("the second line does not count the 2 skipped errors:\n%s", buf.String())
		}
	})
}
