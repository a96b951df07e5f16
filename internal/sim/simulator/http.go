package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DecodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields and trailing data, so a client bug surfaces as a 400 instead of
// being half understood.
func DecodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode body: unexpected data after the JSON object")
	}
	return nil
}

// EncodeJSON encodes v, newline-terminated, as the simulators answer.
func EncodeJSON(v any) []byte {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		// Only the simulators' own fixed types are encoded here; failing is a
		// programming error.
		panic(fmt.Sprintf("simulator: encode %T: %v", v, err))
	}
	return buf.Bytes()
}

// WriteJSON answers status with v as a JSON body.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body := EncodeJSON(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body) // The client may be gone; there is nobody to tell.
}

// ErrorBody is the error body both protocols use,
// {"error":{"type":…,"message":…}}.
func ErrorBody(typ, message string) any {
	return CodedErrorBody(typ, "", message)
}

// CodedErrorBody is ErrorBody with a "code" beside the type, the finer
// reason Stripe gives within a type (such as "rate_limit" within
// "invalid_request_error"); an empty code is left out.
func CodedErrorBody(typ, code, message string) any {
	type detail struct {
		Type    string `json:"type"`
		Code    string `json:"code,omitempty"`
		Message string `json:"message"`
	}
	return struct {
		Error detail `json:"error"`
	}{detail{typ, code, message}}
}

// WriteError answers status with ErrorBody(typ, message).
func WriteError(w http.ResponseWriter, status int, typ, message string) {
	WriteJSON(w, status, ErrorBody(typ, message))
}

// IsCurrency reports whether s is a currency code as the catalog writes
// one: three uppercase ASCII letters.
func IsCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, c := range []byte(s) {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// Sleep waits d unless ctx ends first, and reports whether it slept it all.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
