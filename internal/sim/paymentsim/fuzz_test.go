package paymentsim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecodeCharge feeds arbitrary bodies to the charge decoder. Whatever arrives, it must
// not panic, and whatever it accepts must be a valid request that survives a round trip.
// The seed corpus lives in testdata/fuzz/FuzzDecodeCharge.
func FuzzDecodeCharge(f *testing.F) {
	f.Add([]byte(validBody))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeCharge(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := req.validate(); err != nil {
			t.Fatalf("decodeCharge accepted an invalid request %+v: %v", req, err)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("encode %+v: %v", req, err)
		}
		again, err := decodeCharge(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("decode re-encoded %s: %v", b, err)
		}
		if again != req {
			t.Errorf("round trip: got %+v, want %+v", again, req)
		}
	})
}
