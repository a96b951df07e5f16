package paymentsim

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodeIntentRequest feeds arbitrary bodies to the create's decoder. Whatever arrives,
// it must not panic, and whatever it accepts must be a valid request that survives a round
// trip. The seed corpus lives in testdata/fuzz/FuzzDecodeIntentRequest.
func FuzzDecodeIntentRequest(f *testing.F) {
	f.Add([]byte(intentForm))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, perr := decodeIntentRequest(data)
		if perr != nil {
			return
		}
		if req.Amount <= 0 || !currencyRE.MatchString(req.Currency) || !isToken(req.PaymentMethod, 64) ||
			req.OrderID != "" && !isToken(req.OrderID, 500) || req.Types != "" && strings.ReplaceAll(req.Types+",", "card,", "") != "" {
			t.Fatalf("decodeIntentRequest accepted an invalid request %+v", req)
		}
		body := encodeIntentRequest(req)
		again, perr := decodeIntentRequest([]byte(body))
		if perr != nil {
			t.Fatalf("decode re-encoded %s: %v", body, perr)
		}
		if again != req {
			t.Errorf("round trip: got %+v, want %+v", again, req)
		}
	})
}

// encodeIntentRequest writes req as a client would send it.
func encodeIntentRequest(req intentRequest) string {
	form := url.Values{"amount": {strconv.FormatInt(req.Amount, 10)}, "currency": {req.Currency},
		"payment_method": {req.PaymentMethod}, "confirm": {strconv.FormatBool(req.Confirm)}}
	if req.OrderID != "" {
		form.Set("metadata[order_id]", req.OrderID)
	}
	if req.Types != "" {
		for i, typ := range strings.Split(req.Types, ",") {
			form.Set(fmt.Sprintf("payment_method_types[%d]", i), typ)
		}
	}
	return form.Encode()
}
