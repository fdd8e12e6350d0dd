package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// processCPU is the CPU time (user + system) this process has used: the
// benchmark's clients, and the servers under test when they run in
// process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time (used_cpu_user + used_cpu_sys of INFO cpu) the
// Redis server behind c has used; 0 when c is nil or INFO fails.
func redisCPU(ctx context.Context, c *goredis.Client) time.Duration {
	if c == nil {
		return 0
	}
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, _ := infoField(s, f)
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// infoField reads one numeric field of an INFO reply.
func infoField(info, name string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == name {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}

// cpuMeter takes the CPU readings around one measured run: this process
// (the clients, and the servers when they run in process), the subject's
// server processes when it has any, and Redis.
type cpuMeter struct {
	proc, store time.Duration
	redis       *goredis.Client
	pids        []int
	ticks       int64
}

// startCPU reads the CPU times at the start of a run; server lists the
// subject's server processes (nil: the servers run in this process).
func startCPU(tb testing.TB, redis *goredis.Client, server func() []int) cpuMeter {
	m := cpuMeter{proc: processCPU(), redis: redis}
	if server != nil {
		m.pids = server()
		m.ticks = pidTicks(tb, m.pids)
	}
	m.store = redisCPU(tb.Context(), redis)
	return m
}

// perOp returns the CPU used since start per call: this process's, the
// server processes' (0 without any) and Redis's (0 without one).
func (m cpuMeter) perOp(tb testing.TB, n int) (proc, server, store time.Duration) {
	if n <= 0 {
		return 0, 0, 0
	}
	if m.redis != nil {
		store = (redisCPU(tb.Context(), m.redis) - m.store) / time.Duration(n)
	}
	if m.pids != nil {
		server = time.Duration(pidTicks(tb, m.pids)-m.ticks) * clockTick / time.Duration(n)
	}
	proc = (processCPU() - m.proc) / time.Duration(n)
	return proc, server, store
}

// pidTicks is the summed user+system CPU time of pids in clock ticks; a
// process that cannot be read fails the benchmark (its server died).
func pidTicks(tb testing.TB, pids []int) int64 {
	var sum int64
	for _, p := range pids {
		t, err := cpuTicks(p)
		if err != nil {
			tb.Errorf("cpu of pid %d: %v", p, err)
		}
		sum += t
	}
	return sum
}
