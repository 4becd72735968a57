package router

import (
	"log/slog"
	"sync"
	"time"
)

// logLimiter keeps the router's per-request log lines (held, refused,
// re-placed) readable under overload: up to logBurst lines of one kind a
// second, then one line saying how many were left out. The events carry
// every one of them; the log is for a person.
type logLimiter struct {
	mu    sync.Mutex
	kinds map[string]*logWindow
}

type logWindow struct {
	start      time.Time
	n, dropped int
}

// logBurst is how many lines of one kind a second reach the log.
const logBurst = 5

func (l *logLimiter) log(log *slog.Logger, kind, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if l.kinds == nil {
		l.kinds = map[string]*logWindow{}
	}
	w := l.kinds[kind]
	if w == nil {
		w = &logWindow{start: now}
		l.kinds[kind] = w
	}
	dropped := 0
	if now.Sub(w.start) >= time.Second {
		dropped = w.dropped
		*w = logWindow{start: now}
	}
	w.n++
	ok := w.n <= logBurst
	if !ok {
		w.dropped++
	}
	l.mu.Unlock()
	if dropped > 0 {
		log.Info("log lines left out in the last second (the events have them all)", "kind", kind, "count", dropped)
	}
	if ok {
		log.Info(msg, args...)
	}
}
