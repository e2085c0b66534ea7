package process

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// maxLine bounds a line for the line-by-line matchers; longer lines are
// judged in pieces.
const maxLine = 64 << 10

// lineJudge applies the line-by-line parts of the evaluator to the complete
// stdout: output_contains' pattern, output_numeric's key.
type lineJudge struct {
	mu      sync.Mutex
	pattern *evaluate.Pattern
	key     *evaluate.KeyMatcher
	buf     []byte
	seen    evaluate.Streamed
	// searched is the time the pattern's searches took so far: all of
	// them together get evaluate.MatchBudget, however many lines come.
	searched time.Duration
	now      func() time.Time
}

func newLineJudge(e *v1alpha1.Evaluate) *lineJudge {
	j := &lineJudge{now: time.Now}
	if e == nil {
		return j
	}
	switch {
	case e.Type == v1alpha1.EvalOutputContains && e.Pattern != "":
		p := evaluate.CompilePattern(e.Pattern)
		j.pattern = &p
	case e.Type == v1alpha1.EvalOutputNumeric && e.Key != "":
		k := evaluate.NewKeyMatcher(e.Key)
		j.key = &k
	}
	return j
}

func (j *lineJudge) active() bool { return j.pattern != nil || j.key != nil }

func (j *lineJudge) Write(p []byte) (int, error) {
	if !j.active() {
		return len(p), nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			if len(j.buf) > maxLine {
				j.judge(j.buf[:maxLine])
				j.buf = append(j.buf[:0], j.buf[maxLine:]...)
				continue
			}
			return len(p), nil
		}
		j.judge(j.buf[:i])
		j.buf = j.buf[i+1:]
	}
}

func (j *lineJudge) judge(line []byte) {
	switch {
	case j.pattern != nil && !j.seen.PatternMatched && j.seen.PatternError == "":
		left := evaluate.MatchBudget - j.searched
		start := j.now()
		ok, err := j.pattern.MatchWithin(string(line), left)
		j.searched += j.now().Sub(start)
		j.seen.PatternMatched = ok
		switch {
		case err != nil:
			j.seen.PatternError = fmt.Sprintf("%v (the searches of all lines get %s together)", err, evaluate.MatchBudget)
		case !ok && j.searched >= evaluate.MatchBudget:
			j.seen.PatternError = fmt.Sprintf("the pattern's searches of the output's lines took more than %s together", evaluate.MatchBudget)
		}
	case j.key != nil:
		if v, ok := j.key.Last(string(line)); ok {
			j.seen.KeyValue, j.seen.KeyFound = v, true
		}
	}
}

func (j *lineJudge) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.buf) > 0 {
		j.judge(j.buf)
		j.buf = nil
	}
}

// facts is what the lines showed; nil when the evaluator needs no lines.
func (j *lineJudge) facts() *evaluate.Streamed {
	if !j.active() {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	f := j.seen
	return &f
}

// tail keeps the last max bytes written to it, in a ring.
type tail struct {
	mu    sync.Mutex
	ring  []byte
	max   int
	pos   int
	full  bool
	total int64
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += int64(n)
	if !t.full {
		room := t.max - len(t.ring)
		if len(p) <= room {
			t.ring = append(t.ring, p...)
			return n, nil
		}
		t.ring = append(t.ring, p[:room]...)
		p, t.full, t.pos = p[room:], true, 0
	}
	if len(p) >= t.max {
		copy(t.ring, p[len(p)-t.max:])
		t.pos = 0
		return n, nil
	}
	c := copy(t.ring[t.pos:], p)
	copy(t.ring, p[c:])
	t.pos = (t.pos + len(p)) % t.max
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return string(t.ring)
	}
	return string(t.ring[t.pos:]) + string(t.ring[:t.pos])
}

func (t *tail) truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total > int64(len(t.ring))
}
