package main

import (
	"context"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"
)

// redisLogger routes go-redis's own process-wide messages (dial failures,
// pool events) into our structured log instead of bare lines on stderr.
// They carry addresses, never keys: keys travel only as script arguments.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

func routeRedisLogs(log *slog.Logger) { goredis.SetLogger(redisLogger{log}) }
