package handoff

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// StepLog is one step's part of a runner's log.
type StepLog struct {
	ID               string
	State            string
	Iteration, Retry int32
	// Output is what the step printed (stdout and stderr as the log has
	// them), its escaped marker lines as the step wrote them.
	Output string
	// Ended says the step's frame was closed; End is what closed it
	// ("exit=0", "noresult").
	Ended bool
	End   string
}

// frameLine reads one of the runner's own lines: the step id, "begin" or
// "end", and the rest.
func frameLine(line string) (id, kind, rest string, ok bool) {
	after, found := strings.CutPrefix(line, Marker+" step ")
	if !found {
		return "", "", "", false
	}
	id, after, _ = strings.Cut(after, " ")
	kind, rest, _ = strings.Cut(after, " ")
	if kind != "begin" && kind != "end" {
		return "", "", "", false
	}
	return id, kind, rest, true
}

// parseBegin reads a begin line's state="..." iteration=N retry=N.
func parseBegin(s *StepLog, rest string) {
	if q, ok := strings.CutPrefix(rest, "state="); ok {
		if state, err := strconv.QuotedPrefix(q); err == nil {
			s.State, _ = strconv.Unquote(state)
			rest = q[len(state):]
		}
	}
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 32)
		switch k {
		case "iteration":
			s.Iteration = int32(n)
		case "retry":
			s.Retry = int32(n)
		}
	}
}

// unescape gives back a step's line that began with the marker.
func unescape(line string) string {
	if strings.HasPrefix(line, `\`+Marker) {
		return line[1:]
	}
	return line
}

// ParseLog splits a runner's log into its steps, in the order they began.
// Lines outside any step's frame (the runner's own) are dropped.
func ParseLog(r io.Reader) []StepLog {
	var steps []StepLog
	open := map[string]int{}
	var out []strings.Builder
	current := -1
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if id, kind, rest, ok := frameLine(line); ok {
			switch kind {
			case "begin":
				steps = append(steps, StepLog{ID: id})
				out = append(out, strings.Builder{})
				parseBegin(&steps[len(steps)-1], rest)
				open[id], current = len(steps)-1, len(steps)-1
			case "end":
				if i, ok := open[id]; ok {
					steps[i].Ended, steps[i].End = true, rest
					delete(open, id)
					if current == i {
						current = -1
					}
				}
			}
			continue
		}
		if current >= 0 {
			_, _ = out[current].WriteString(unescape(line))
			_ = out[current].WriteByte('\n')
		}
	}
	for i := range steps {
		steps[i].Output = out[i].String()
	}
	return steps
}

// StepFilter passes on the lines of one step's frame of a runner's log as
// they come (a followed log), unescaped; Done says its frame closed.
type StepFilter struct {
	ID   string
	Emit func(string)
	in   bool
	done bool
	part []byte
}

// Write implements io.Writer.
func (f *StepFilter) Write(p []byte) (int, error) {
	n := len(p)
	f.part = append(f.part, p...)
	for {
		i := strings.IndexByte(string(f.part), '\n')
		if i < 0 {
			break
		}
		line := string(f.part[:i])
		f.part = f.part[i+1:]
		if id, kind, _, ok := frameLine(line); ok {
			if id == f.ID {
				f.in, f.done = kind == "begin", f.done || kind == "end"
			}
			continue
		}
		if f.in && !f.done {
			f.Emit(unescape(line) + "\n")
		}
	}
	return n, nil
}

// Done says the step's frame closed.
func (f *StepFilter) Done() bool { return f.done }
