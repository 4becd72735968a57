package batch

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress draws a one-line progress bar, redrawn in place with '\r'. It
// redraws at most every 100ms so that a 10,000-line submit does not spend
// its time writing to a terminal.
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	total int
	n     int
	last  time.Time
	start time.Time
	// note follows the bar: why work waits, and the ETA.
	note string
	// width is the longest line drawn, so a shorter redraw can blank the
	// rest of it.
	width int
}

// SetNote sets the text drawn after the bar from the next redraw on.
func (p *Progress) SetNote(note string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.note = note
	p.mu.Unlock()
}

func (p *Progress) line(elapsed time.Duration) string {
	s := Bar(p.label, p.n, p.total, 30, elapsed)
	if p.note != "" {
		s += "  " + p.note
	}
	if pad := p.width - len(s); pad > 0 {
		s += strings.Repeat(" ", pad)
	} else {
		p.width = len(s)
	}
	return s
}

// NewProgress starts a bar on w (usually stderr); nil w draws nothing.
func NewProgress(w io.Writer, label string, total int) *Progress {
	return &Progress{w: w, label: label, total: total, start: time.Now()}
}

// Set records n units done and redraws when due.
func (p *Progress) Set(n int) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	if now := time.Now(); n >= p.total || now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		fmt.Fprint(p.w, "\r"+p.line(now.Sub(p.start)))
	}
}

// Done draws the final state and ends the line.
func (p *Progress) Done() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w, "\r"+p.line(time.Since(p.start)))
}

// Bar renders "label [=====>     ] n/total pct% elapsed".
func Bar(label string, n, total, width int, elapsed time.Duration) string {
	frac := 1.0
	if total > 0 {
		frac = float64(min(max(n, 0), total)) / float64(total)
	}
	fill := int(frac * float64(width))
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	return fmt.Sprintf("%s [%s] %d/%d %3.0f%% %s", label, bar, n, total, frac*100, elapsed.Round(100*time.Millisecond))
}
