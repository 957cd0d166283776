package caddyproc

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// pin runs cmd on the CPUs that TEXTGEN_CADDY_CPUS lists ("2-3", "0,4-5": taskset's list
// syntax), with GOMAXPROCS set to their number, so that a benchmark can give the caddy processes
// cores of their own, away from its load generator and backend (.ci/bench-isolated). taskset
// execs the program, so the process keeps the pid the benchmarks read its CPU time by. Unset, cmd
// is left as it is.
func pin(cmd *exec.Cmd) error {
	list := os.Getenv("TEXTGEN_CADDY_CPUS")
	if list == "" {
		return nil
	}
	n, err := countCPUs(list)
	if err != nil {
		return fmt.Errorf("TEXTGEN_CADDY_CPUS=%q: %w", list, err)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("TEXTGEN_CADDY_CPUS needs taskset (util-linux): %w", err)
	}
	cmd.Args = append([]string{taskset, "-c", list}, cmd.Args...)
	cmd.Path = taskset
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "GOMAXPROCS="+strconv.Itoa(n))
	return nil
}

// countCPUs counts the CPUs of a list in taskset's syntax: numbers and ranges, comma-separated.
func countCPUs(list string) (int, error) {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("%q is not a CPU number", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("%q is not a CPU range", part)
			}
		}
		n += b - a + 1
	}
	return n, nil
}
