package throughput

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A postgres backend's line: the command name holds spaces and parentheses.
const backendStat = "4242 (postgres: postgres app 127.0.0.1(51234) idle) S 4000 4000 4000 0 -1 4194560 " +
	"1185 0 0 0 731 129 5 7 20 0 1 0 27551 226340864 5321 18446744073709551615 1 1 0 0 0 0 4194304 " +
	"19935232 1275615875 0 0 0 17 1 0 0 0 0 0"

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	got, err := parseProcStat(backendStat)
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{PID: 4242, PPID: 4000, Own: (731 + 129) * 10 * time.Millisecond, Children: (5 + 7) * 10 * time.Millisecond}
	if got != want {
		t.Errorf("parseProcStat = %+v, want %+v", got, want)
	}

	for name, line := range map[string]string{
		"no name":      "4242 postgres S 4000",
		"short":        "4242 (x) S 4000 1 2 3",
		"not a number": "4242 (x) S 4000 4000 4000 0 -1 4194560 1185 0 0 0 seven 129 5 7 20",
		"bad pid":      "x (x) S 4000 4000 4000 0 -1 4194560 1185 0 0 0 7 129 5 7 20",
	} {
		if _, err := parseProcStat(line); err == nil {
			t.Errorf("%s: parseProcStat(%q) succeeded, want an error", name, line)
		}
	}
}

func TestParseProcStatOfThisProcess(t *testing.T) {
	t.Parallel()
	s, err := readProcStat("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != os.Getpid() || s.PPID != os.Getppid() {
		t.Errorf("pid %d ppid %d, want %d %d", s.PID, s.PPID, os.Getpid(), os.Getppid())
	}
}

// fakeProc writes /proc/<pid>/stat files: pid → (ppid, utime, stime, cutime, cstime) in ticks.
func fakeProc(t *testing.T, procs map[int][5]int) string {
	t.Helper()
	root := t.TempDir()
	for pid, v := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (postgres: a (b)) S " + strconv.Itoa(v[0]) + " 1 1 0 -1 0 0 0 0 0 " +
			strconv.Itoa(v[1]) + " " + strconv.Itoa(v[2]) + " " + strconv.Itoa(v[3]) + " " + strconv.Itoa(v[4]) + " 20 0 1 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Entries that are not processes are ignored.
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu 1 2 3 4 5 6 7 8 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "self-ish"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestTreeCPU(t *testing.T) {
	t.Parallel()
	root := fakeProc(t, map[int][5]int{
		100: {1, 10, 5, 300, 40}, // postmaster: reaped children's time in cutime/cstime
		101: {100, 20, 2, 0, 0},  // backend
		102: {100, 7, 1, 1, 0},   // checkpointer
		200: {1, 900, 900, 0, 0}, // another process
		201: {101, 50, 50, 0, 0}, // a grandchild: not PostgreSQL's
	})
	got, err := treeCPU(root, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := (10 + 5 + 300 + 40 + 20 + 2 + 7 + 1 + 1) * clockTick; got != want {
		t.Errorf("treeCPU = %s, want %s", got, want)
	}
	if _, err := treeCPU(root, 999); err == nil {
		t.Error("treeCPU of a missing parent succeeded, want an error")
	}
	if got, err := processCPU(root, 101); err != nil || got != 22*clockTick {
		t.Errorf("processCPU = %s, %v, want %s", got, err, 22*clockTick)
	}
}

func TestParseMachineStat(t *testing.T) {
	t.Parallel()
	got, err := parseMachineStat("cpu  100 5 50 1000 20 3 2 1 40 0\ncpu0 50 2 25 500 10 1 1 0 20 0\n")
	if err != nil {
		t.Fatal(err)
	}
	// Busy: user nice system irq softirq steal; idle and iowait are not.
	if want := (machineCPU{Busy: 161 * clockTick, Total: 1181 * clockTick}); got != want {
		t.Errorf("parseMachineStat = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 x 5 6 7 8"} {
		if _, err := parseMachineStat(bad); err == nil {
			t.Errorf("parseMachineStat(%q) succeeded, want an error", bad)
		}
	}
}
