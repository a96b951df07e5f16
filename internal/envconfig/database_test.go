package envconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/database"
	"github.com/resilientcheckout/checkout/internal/envconfig"
)

// TestDatabaseStatementTimeout: 0 turns the startup parameter off (behind
// PgBouncer the role's setting applies); a value under 100ms is refused.
func TestDatabaseStatementTimeout(t *testing.T) {
	t.Parallel()
	def := database.Config{StatementTimeout: 2 * time.Second}
	tests := []struct {
		value   string
		want    time.Duration
		wantErr bool
	}{
		{"", 2 * time.Second, false},
		{"0", 0, false},
		{"0s", 0, false},
		{"100ms", 100 * time.Millisecond, false},
		{"5s", 5 * time.Second, false},
		{"50ms", 2 * time.Second, true},
		{"2m", 2 * time.Second, true},
		{"-1s", 2 * time.Second, true},
	}
	for _, tt := range tests {
		r := envconfig.New(func(k string) string { return map[string]string{"DB_STATEMENT_TIMEOUT": tt.value}[k] })
		got := r.Database(def).StatementTimeout
		err := r.Err()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("DB_STATEMENT_TIMEOUT=%q: got %v, err %v; want %v, error %v", tt.value, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "DB_STATEMENT_TIMEOUT") {
			t.Errorf("DB_STATEMENT_TIMEOUT=%q: error %q does not name the variable", tt.value, err)
		}
	}
}
