package payment_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resilientcheckout/checkout/internal/payment"
)

// stripeMockURL is the base URL of Stripe's own mock (github.com/stripe/stripe-mock, pinned
// in tools/stripemock): STRIPE_MOCK_URL when set (.ci/run starts one), otherwise one this
// test binary builds and starts, and stops when the package's tests are done (TestMain).
func stripeMockURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
		return u
	}
	mockOnce.Do(func() { mockURL, mockErr = startStripeMock() })
	if mockErr != nil {
		t.Fatalf("stripe-mock: %v (set STRIPE_MOCK_URL to a running one, or make `go build -modfile=tools/stripemock/go.mod github.com/stripe/stripe-mock` work)", mockErr)
	}
	return mockURL
}

var (
	mockOnce sync.Once
	mockURL  string
	mockErr  error
	mockDir  string
)

var listening = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// startStripeMock builds stripe-mock from the pinned tool module (cached after the first
// build) and runs it on free loopback ports. The binary is run directly, not through
// `go tool`, whose child would outlive a killed `go`.
func startStripeMock() (string, error) {
	modfile, err := filepath.Abs(filepath.Join("..", "..", "tools", "stripemock", "go.mod"))
	if err != nil {
		return "", err
	}
	if mockDir, err = os.MkdirTemp("", "stripe-mock"); err != nil {
		return "", err
	}
	bin := filepath.Join(mockDir, "stripe-mock")
	if out, err := exec.Command("go", "build", "-modfile="+modfile, "-o", bin, "github.com/stripe/stripe-mock").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build: %w: %s", err, out)
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", err
	}
	mockProcess = cmd.Process
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- "http://" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case u := <-found:
		return u, nil
	case <-time.After(time.Minute):
		return "", errors.New("not listening within a minute")
	}
}

var mockProcess *os.Process

func TestMain(m *testing.M) {
	code := m.Run()
	if mockProcess != nil {
		_ = mockProcess.Kill()
		_, _ = mockProcess.Wait()
	}
	if mockDir != "" {
		_ = os.RemoveAll(mockDir)
	}
	os.Exit(code)
}

// TestRequestsMatchStripesAPI is the contract test: every request the client can send —
// the create, a list page with and without a window and a cursor, the probe — goes to
// stripe-mock, which validates it against Stripe's OpenAPI description (routes, parameter
// names and types, form encoding, the key's shape) and answers 400 for anything Stripe
// would refuse. stripe-mock is stateless: it checks shape, paymentsim checks behaviour; its
// PaymentIntents are fixtures whose status is not succeeded, so a create's answer reads as
// no receipt (a 200 without a succeeded intent), which is fine here.
func TestRequestsMatchStripesAPI(t *testing.T) {
	t.Parallel()
	client, err := payment.NewClient(payment.Config{BaseURL: stripeMockURL(t), SecretKey: "sk_test_contract"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	requests := map[string]func(context.Context) error{
		"create and confirm": func(ctx context.Context) error {
			_, err := client.Charge(ctx, payment.ChargeRequest{OrderID: "0193a000-0000-7000-8000-000000000001", Amount: 2598, Currency: "USD", PaymentMethod: "pm_card_visa"})
			return err
		},
		"list page": func(ctx context.Context) error {
			_, err := client.ListCharges(ctx, payment.ListQuery{Limit: 100})
			return err
		},
		"list page of a window": func(ctx context.Context) error {
			_, err := client.ListCharges(ctx, payment.ListQuery{CreatedGTE: now.Add(-time.Hour), CreatedLTE: now, Limit: 100})
			return err
		},
		"list page after a cursor": func(ctx context.Context) error {
			_, err := client.ListCharges(ctx, payment.ListQuery{CreatedGTE: now.Add(-time.Hour), CreatedLTE: now, StartingAfter: "pi_123", Limit: 100})
			return err
		},
		"lookup": func(ctx context.Context) error {
			_, err := client.FindCharges(ctx, payment.Lookup{OrderID: "o1", CreatedFrom: now.Add(-time.Minute), CreatedTo: now})
			return err
		},
		"probe": client.Probe,
	}
	for name, send := range requests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := send(t.Context())
			if err == nil {
				return
			}
			perr, ok := errors.AsType[*payment.Error](err)
			switch {
			case ok && perr.StatusCode == http.StatusOK:
				// Accepted; the fixture is no succeeded PaymentIntent.
			case ok && perr.StatusCode >= 400:
				t.Errorf("stripe-mock refused the request, as Stripe would: %v", err)
			default:
				t.Errorf("no answer from stripe-mock: %v", err)
			}
		})
	}
}

// TestStripeMockRefusesWhatStripeWould: the contract test's mock is strict where it
// matters, so its passing means something: a misspelled parameter and a JSON body are each
// answered 400.
func TestStripeMockRefusesWhatStripeWould(t *testing.T) {
	t.Parallel()
	base := stripeMockURL(t)
	for name, req := range map[string]struct{ contentType, body string }{
		"misspelled parameter": {"application/x-www-form-urlencoded", "amount=2598&currency=usd&payment_methd=pm_card_visa&confirm=true"},
		"JSON body":            {"application/json", `{"amount":2598,"currency":"usd","payment_method":"pm_card_visa","confirm":true}`},
	} {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/payment_intents", strings.NewReader(req.body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer sk_test_contract")
		r.Header.Set("Content-Type", req.contentType)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: stripe-mock answered %d, want 400", name, resp.StatusCode)
		}
	}
}
