package caddyproc

import "testing"

// TestCountCPUs: the caddy processes get GOMAXPROCS equal to the CPUs of TEXTGEN_CADDY_CPUS, in
// taskset's list syntax, and a list taskset would refuse is refused here first.
func TestCountCPUs(t *testing.T) {
	for list, want := range map[string]int{"0": 1, "0-1": 2, "2-3": 2, "0,4-5": 3, "0-7,8,10-15": 15} {
		if n, err := countCPUs(list); err != nil || n != want {
			t.Errorf("countCPUs(%q) = %d, %v; want %d", list, n, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1-", "-1", "0,,1"} {
		if n, err := countCPUs(bad); err == nil {
			t.Errorf("countCPUs(%q) = %d, want an error", bad, n)
		}
	}
}
