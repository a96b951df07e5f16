package throughput

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of the CPU times in /proc: USER_HZ, which Linux fixes
// at 100 for user space on every architecture Go supports (sysconf(_SC_CLK_TCK)
// returns it; reading it would need cgo).
const clockTick = 10 * time.Millisecond

// procStat is the part of /proc/<pid>/stat the accounting needs (proc(5)).
type procStat struct {
	PID, PPID int
	// Own is the CPU the process's threads used (utime + stime).
	Own time.Duration
	// Children is the CPU of children the process has waited for
	// (cutime + cstime): a Postgres backend that exits hands its time to
	// the postmaster this way.
	Children time.Duration
}

// parseProcStat reads one /proc/<pid>/stat line. The command name is in
// parentheses and may itself contain spaces and parentheses, so the fields
// are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("proc stat %q: no command name", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat %q: pid: %w", line, err)
	}
	// Fields after the name, numbered as in proc(5) from 3 (state).
	f := strings.Fields(line[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("proc stat %q: %d fields after the name, want at least 15", line, len(f))
	}
	field := func(n int) (int64, error) { return strconv.ParseInt(f[n-3], 10, 64) }
	var v [5]int64
	for i, n := range []int{4, 14, 15, 16, 17} { // ppid, utime, stime, cutime, cstime
		if v[i], err = field(n); err != nil {
			return procStat{}, fmt.Errorf("proc stat %q: field %d: %w", line, n, err)
		}
	}
	return procStat{
		PID:      pid,
		PPID:     int(v[0]),
		Own:      time.Duration(v[1]+v[2]) * clockTick,
		Children: time.Duration(v[3]+v[4]) * clockTick,
	}, nil
}

// readProcStat reads /proc/<pid>/stat under root (normally "/proc").
func readProcStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// processCPU is the CPU a single process (all its threads) used so far.
func processCPU(root string, pid int) (time.Duration, error) {
	s, err := readProcStat(root, pid)
	if err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", pid, err)
	}
	return s.Own, nil
}

// treeCPU is the CPU a server that forks a process per session used so far:
// the parent's own, its live children's (backends, background workers) and
// that of the children that already exited (counted in the parent's
// cutime/cstime once it reaped them). Only direct children are walked:
// PostgreSQL's processes are all children of the postmaster.
func treeCPU(root string, parent int) (time.Duration, error) {
	p, err := readProcStat(root, parent)
	if err != nil {
		return 0, fmt.Errorf("cpu of process %d: %w", parent, err)
	}
	total := p.Own + p.Children
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		s, err := readProcStat(root, pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited since the listing (reading a dying process's stat gives ESRCH)
		}
		if err != nil {
			return 0, err
		}
		if s.PPID == parent {
			total += s.Own + s.Children
		}
	}
	return total, nil
}

// machineCPU is the machine's CPU time from the first line of /proc/stat.
type machineCPU struct {
	Busy, Total time.Duration
}

// parseMachineStat reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal (guest time is already in user).
// Idle and iowait are the time no task ran.
func parseMachineStat(content string) (machineCPU, error) {
	line, _, _ := strings.Cut(content, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: first line %q is not the cpu total", line)
	}
	var m machineCPU
	for i, s := range f[1:9] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		d := time.Duration(n) * clockTick
		m.Total += d
		if i != 3 && i != 4 { // idle, iowait
			m.Busy += d
		}
	}
	return m, nil
}

func readMachineCPU(root string) (machineCPU, error) {
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return machineCPU{}, err
	}
	return parseMachineStat(string(b))
}
