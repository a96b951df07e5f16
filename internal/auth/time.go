package auth

import (
	"encoding/json"
	"math"
	"time"
)

// jsonTime is a NumericDate (RFC 7519, 2): seconds since the epoch, maybe
// with a fraction.
type jsonTime time.Time

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	f, err := n.Float64()
	if err != nil {
		return err
	}
	sec, frac := math.Modf(f)
	*t = jsonTime(time.Unix(int64(sec), int64(frac*1e9)))
	return nil
}
