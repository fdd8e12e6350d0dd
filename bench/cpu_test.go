package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// processCPU is the CPU time (user + system) this process has used: the
// benchmark's clients and the servers under test together, as they share
// the process.
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

// cpuMeter takes the CPU readings around one measured run.
type cpuMeter struct {
	proc, store time.Duration
	redis       *goredis.Client
}

func startCPU(ctx context.Context, redis *goredis.Client) cpuMeter {
	return cpuMeter{proc: processCPU(), store: redisCPU(ctx, redis), redis: redis}
}

// perOp returns the process and store CPU used since start, per call.
func (m cpuMeter) perOp(ctx context.Context, n int) (proc, store time.Duration) {
	if n <= 0 {
		return 0, 0
	}
	proc = (processCPU() - m.proc) / time.Duration(n)
	if m.redis != nil {
		store = (redisCPU(ctx, m.redis) - m.store) / time.Duration(n)
	}
	return proc, store
}
