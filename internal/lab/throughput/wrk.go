package throughput

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ordersScript is wrk's Lua script: unique keys per request, responses
// counted by status, one parseable result line.
//
//go:embed orders.lua
var ordersScript []byte

// resultMarker starts the line orders.lua's done() prints.
const resultMarker = "THROUGHPUT_RESULT "

// wrkResult is what one wrk invocation reports.
type wrkResult struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	Errors     struct {
		Connect int64 `json:"connect"`
		Read    int64 `json:"read"`
		Write   int64 `json:"write"`
		Status  int64 `json:"status"`
		Timeout int64 `json:"timeout"`
	} `json:"errors"`
	LatencyUS struct {
		P50 int64 `json:"p50"`
		P90 int64 `json:"p90"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"latency_us"`
	Status struct {
		Created     int64 `json:"created"`
		Other2xx    int64 `json:"other_2xx"`
		Not2xx      int64 `json:"not_2xx"`
		FirstNot2xx int   `json:"first_not_2xx"`
	} `json:"status"`
	// CPU is wrk's own CPU time (user + system), from its process state.
	CPU time.Duration `json:"-"`
}

// parseWrkOutput finds the result line in wrk's standard output.
func parseWrkOutput(out []byte) (wrkResult, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), resultMarker)
		if !ok {
			continue
		}
		var r wrkResult
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return wrkResult{}, fmt.Errorf("wrk result line %q: %w", line, err)
		}
		return r, nil
	}
	return wrkResult{}, fmt.Errorf("wrk printed no %q line; its output:\n%s", strings.TrimSpace(resultMarker), out)
}

// Rate is completed requests per second over the run.
func (r wrkResult) Rate() float64 {
	if r.DurationUS <= 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

// check refuses a run that had anything but 2xx answers or any socket
// error: a rate that includes failures or lost connections would flatter the
// server. Socket errors are connect, read, write and timeout (wrk's
// "Socket errors" line); errors.status is wrk's own count of answers ≥ 400,
// kept as a cross-check of the script's count.
func (r wrkResult) check() error {
	var problems []string
	if n := r.Status.Not2xx; n > 0 {
		problems = append(problems, fmt.Sprintf("%d answers were not 2xx (the first: %d)", n, r.Status.FirstNot2xx))
	}
	if n := r.Errors.Status; n > 0 && r.Status.Not2xx == 0 {
		problems = append(problems, fmt.Sprintf("wrk counted %d answers ≥ 400", n))
	}
	e := r.Errors
	if e.Connect+e.Read+e.Write+e.Timeout > 0 {
		problems = append(problems, fmt.Sprintf("socket errors: connect %d, read %d, write %d, timeout %d",
			e.Connect, e.Read, e.Write, e.Timeout))
	}
	if r.Requests == 0 {
		problems = append(problems, "no request completed")
	}
	if got := r.Status.Created + r.Status.Other2xx + r.Status.Not2xx; got != r.Requests {
		problems = append(problems, fmt.Sprintf("the script counted %d answers, wrk %d requests", got, r.Requests))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// loadConfig is the closed-loop load: wrk's threads and connections.
type loadConfig struct {
	Wrk         string // path of the wrk binary
	Threads     int
	Connections int
	Timeout     time.Duration // wrk's per-request timeout; a slower answer is a socket error
}

// wrkSeconds spells a duration for wrk, which takes whole seconds only
// (Config.validate rejects anything else).
func wrkSeconds(d time.Duration) string { return strconv.Itoa(int(d/time.Second)) + "s" }

// runWrk places orders at url for d with unique keys starting with prefix.
func runWrk(ctx context.Context, cfg loadConfig, dir, url string, d time.Duration, prefix string) (wrkResult, error) {
	script := filepath.Join(dir, "orders.lua")
	if err := os.WriteFile(script, ordersScript, 0o644); err != nil {
		return wrkResult{}, err
	}
	args := []string{
		"-t", strconv.Itoa(cfg.Threads), "-c", strconv.Itoa(cfg.Connections),
		"-d", wrkSeconds(d), "--timeout", wrkSeconds(cfg.Timeout),
		"-s", script, url, "--", prefix,
	}
	cmd := exec.CommandContext(ctx, cfg.Wrk, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	r, err := parseWrkOutput(stdout.Bytes())
	if err != nil {
		return wrkResult{}, err
	}
	r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}
