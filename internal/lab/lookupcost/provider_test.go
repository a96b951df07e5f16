package lookupcost

import (
	"testing"

	"github.com/google/uuid"
)

func TestNewAudit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outcome outcome // what the lab believes after settling
		charged int     // succeeded PaymentIntents on the provider's list
		want    Audit
	}{
		{"paid and charged once", paid, 1, Audit{ChargedOnce: 1}},
		{"not charged and not", notCharged, 0, Audit{NotCharged: 1}},
		{"unsettled and not charged", unknown, 0, Audit{NotCharged: 1}},
		{"not charged, yet charged", notCharged, 1, Audit{Lost: 1}},
		{"unsettled, yet charged", unknown, 1, Audit{Lost: 1}},
		{"paid, yet not charged", paid, 0, Audit{Missing: 1}},
		{"paid and charged twice", paid, 2, Audit{Doubled: 1}},
		{"not charged, yet charged twice", notCharged, 2, Audit{Doubled: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := &trackedOrder{id: uuid.New(), outcome: tt.outcome}
			charges := map[string]int{uuid.NewString(): 1} // another order's charge counts for none
			if tt.charged > 0 {
				charges[o.id.String()] = tt.charged
			}
			if got := newAudit(charges, []*trackedOrder{o}); got != tt.want {
				t.Errorf("newAudit() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
