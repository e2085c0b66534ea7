package interpolate

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pycompat"
)

// Result is the current state's evaluation, the ${result.*} namespace.
type Result struct {
	Verdict string
	Details map[string]any
}

// Vars holds what templates can read.
type Vars struct {
	Context   map[string]any
	Captured  map[string]v1alpha1.CapturedResult
	Prev      *v1alpha1.PrevResult
	Result    *Result
	StateName string
	Iteration int32
	LoopName  string
	// RunID names the run: ${run.id}.
	RunID     string
	StartedAt time.Time
	Elapsed   time.Duration
	// Env looks up environment variables; nil means none are visible.
	Env func(string) (string, bool)
	// Param holds the state's fragment parameters, ${param.NAME}.
	Param map[string]any
	// Messages is the run's messages log: ${messages}, ${messages.output},
	// ${messages.last(N)}, ${messages.summary}.
	Messages []string
	// Exit adds to ${loop.*} how the run ended, for its exit hook.
	Exit map[string]any
}

// lastN matches ${messages.last(N)}.
var lastN = regexp.MustCompile(`^last\((\d+)\)$`)

// messages resolves ${messages.PATH} as little-loops does: the entries one
// a line; last(0) is all of them (Python's [-0:]); the summary is empty
// (little-loops never writes one).
func (v *Vars) messages(path string) (any, error) {
	switch path {
	case "", "output":
		return strings.Join(v.Messages, "\n"), nil
	case "summary":
		return "", nil
	}
	m := lastN.FindStringSubmatch(path)
	if m == nil {
		return nil, fmt.Errorf("unknown messages property %q (output, last(N), summary)", path)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n == 0 || n > len(v.Messages) {
		n = len(v.Messages)
	}
	return strings.Join(v.Messages[len(v.Messages)-n:], "\n"), nil
}

var errNotFound = errors.New("not defined")

func (v *Vars) resolve(ns string, path []string) (any, error) {
	switch ns {
	case "messages":
		return v.messages(strings.Join(path, "."))
	case "context":
		return walk(anyMap(v.Context), path)
	case "captured":
		c, ok := v.Captured[path[0]]
		if !ok {
			return nil, fmt.Errorf("nothing captured under %q yet", path[0])
		}
		return walk(capturedMap(c), path[1:])
	case "prev":
		if v.Prev == nil {
			return nil, errors.New("no previous state result yet")
		}
		return walk(map[string]any{"output": v.Prev.Output, "exit_code": v.Prev.ExitCode, "exitCode": v.Prev.ExitCode, "state": v.Prev.State,
			"timeout_kind": orNil(v.Prev.TimeoutKind)}, path)
	case "result":
		if v.Result == nil {
			return nil, errors.New("no evaluation result in this state yet (result is only readable in route targets)")
		}
		return walk(map[string]any{"verdict": v.Result.Verdict, "details": anyMap(v.Result.Details)}, path)
	case "state":
		return walk(map[string]any{"name": v.StateName, "iteration": v.Iteration}, path)
	case "loop":
		loop := map[string]any{
			"name":       v.LoopName,
			"started_at": v.StartedAt.UTC().Format(time.RFC3339Nano),
			"elapsed_ms": v.Elapsed.Milliseconds(),
			"elapsed":    FormatElapsed(v.Elapsed),
		}
		maps.Copy(loop, v.Exit)
		return walk(loop, path)
	case "run":
		return walk(map[string]any{"id": v.RunID}, path)
	case "param":
		if v.Param == nil {
			return nil, errors.New("the state binds no fragment parameters")
		}
		return walk(v.Param, path)
	case "env":
		if len(path) != 1 {
			return nil, errors.New("env takes one variable name")
		}
		if v.Env != nil {
			if s, ok := v.Env(path[0]); ok {
				return s, nil
			}
		}
		return nil, errors.New("environment variable is not set")
	}
	return nil, fmt.Errorf("unknown namespace %q", ns)
}

func anyMap(m map[string]any) any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func capturedMap(c v1alpha1.CapturedResult) map[string]any {
	if c.EventStream || c.Loop != nil {
		// A sub-loop state's capture: the child's event stream, with a
		// null exit code and no stderr nor duration. Its entry under the
		// state's name: the child's captures by name and how it ended,
		// nothing of its own (but the verdict when the capture has the
		// state's name, and the event stream unless the child's captures
		// took its place).
		m := map[string]any{}
		if c.EventStream {
			m["output"], m["exit_code"], m["exitCode"] = c.Output, nil, nil
		}
		if c.EventStream || c.Verdict != "" {
			m["verdict"] = c.Verdict
		}
		if l := c.Loop; l != nil {
			addChildCaptures(m, l.Captured)
			addEnding(m, l.TerminatedBy, l.FailureTerminal, l.Error)
		}
		return m
	}
	m := map[string]any{
		"output":      c.Output,
		"stderr":      c.Stderr,
		"exit_code":   c.ExitCode,
		"exitCode":    c.ExitCode,
		"duration_ms": c.DurationMs,
		"durationMs":  c.DurationMs,
		"verdict":     c.Verdict,
	}
	// Why the action failed, and how it timed out (nothing when it did
	// not, which reads as "").
	m["failure_type"], m["timeout_kind"] = c.FailureType, orNil(c.TimeoutKind)
	return m
}

// orNil is s, or nil (no value, which expands to "") when s is empty.
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ChildCaptured is a sub-loop state's entry as a value, as a child that
// gets its parent's captures (contextPassthrough) reads it in its context:
// how the child ended and its captures by name, like ${captured.STATE}.
func ChildCaptured(l *v1alpha1.SubLoopResult) map[string]any {
	m := map[string]any{}
	addChildCaptures(m, l.Captured)
	addEnding(m, l.TerminatedBy, l.FailureTerminal, l.Error)
	return m
}

// addChildCaptures puts a child's captures into m by name: a capture at
// inner.greeting (see v1alpha1.SubLoopResult) goes into inner's entry. The
// entry of a sub-loop state of the child holds how its loop ended and
// that loop's captures, as little-loops keeps it (no output of its own).
func addChildCaptures(m map[string]any, captured map[string]v1alpha1.ChildCapture) {
	for _, name := range slices.Sorted(maps.Keys(captured)) {
		cc := captured[name]
		at := m
		path := strings.Split(name, ".")
		for _, p := range path[:len(path)-1] {
			next, ok := at[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				at[p] = next
			}
			at = next
		}
		entry, ok := at[path[len(path)-1]].(map[string]any)
		if !ok {
			entry = map[string]any{}
			at[path[len(path)-1]] = entry
		}
		if cc.TerminatedBy != "" {
			addEnding(entry, cc.TerminatedBy, cc.FailureTerminal, cc.Error)
			continue
		}
		// The child's whole capture record, as its own ${captured.NAME};
		// a state that judged nothing (next:) has no verdict there, as
		// little-loops writes the verdict only after judging.
		maps.Copy(entry, capturedMap(v1alpha1.CapturedResult{Output: cc.Output, Stderr: cc.Stderr, ExitCode: cc.ExitCode,
			DurationMs: cc.DurationMs, Verdict: cc.Verdict, FailureType: cc.FailureType, TimeoutKind: cc.TimeoutKind}))
		if cc.Verdict == "" {
			delete(entry, "verdict")
		}
	}
}

// addEnding puts how a sub-loop ended into its entry m: terminated_by,
// and failure_terminal and error when there are.
func addEnding(m map[string]any, terminatedBy string, failureTerminal bool, err string) {
	m["terminated_by"] = terminatedBy
	if failureTerminal {
		m["failure_terminal"] = true
	}
	if err != "" {
		m["error"] = err
	}
}

func walk(v any, path []string) (any, error) {
	if v, ok := Walk(v, path); ok {
		return v, nil
	}
	return nil, errNotFound
}

// Walk follows path through nested objects and lists (a segment that is a
// non-negative integer indexes a list).
func Walk(v any, path []string) (any, bool) {
	for _, p := range path {
		switch t := v.(type) {
		case *pycompat.Dict:
			next, ok := t.Get(p)
			if !ok {
				return nil, false
			}
			v = next
		case map[string]any:
			next, ok := t[p]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(t) {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// FormatElapsed renders a duration as 500ms, 30s, 2m, 2m 15s or 1h 5m.
func FormatElapsed(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm %ds", m, s)
	}
	h, m := int(d.Hours()), int(d.Minutes())%60
	if m == 0 {
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh %dm", h, m)
}
