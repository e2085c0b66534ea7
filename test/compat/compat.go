// Package compat runs loop files of the compatibility corpus (this
// directory's *.yaml, whose sub-loops are in lib/; NAME.args, when there,
// holds further arguments of run, one a line) with looprun, and with
// little-loops' ll-loop when it is at hand (hack/compat), and sums up what
// each run did in a form both give: exit code, final state, iterations,
// terminated_by, routes, captures and files written. The outcomes
// ll-loop gave are kept beside the files as NAME.golden.json; the tests
// check looprun against them without the original.
package compat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Outcome is what a run of a loop did.
type Outcome struct {
	ExitCode     int               `json:"exitCode"`
	FinalState   string            `json:"finalState"`
	Iterations   int               `json:"iterations"`
	TerminatedBy string            `json:"terminatedBy"`
	Routes       []string          `json:"routes"`
	Captured     map[string]string `json:"captured"`
	Files        map[string]string `json:"files"`
	// Usage is, per agent action that reported it, the token keys of its
	// action_complete event.
	Usage []string `json:"usage,omitempty"`
	// UsageRows are the rows of the run_dir's usage.jsonl, as written but
	// for their timestamps.
	UsageRows []string `json:"usageRows,omitempty"`
	// Messages are the rows of the run_dir's messages.jsonl, as written
	// but for their timestamps.
	Messages []string `json:"messages,omitempty"`
}

// Names lists the loops of the corpus in dir.
func Names(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".yaml"))
	}
	sort.Strings(names)
	return names, nil
}

// prepare makes a working directory holding the loop file and, in its
// .loops, the corpus library (the loops sub-loops run).
func prepare(corpus, name string) (string, error) {
	dir, err := os.MkdirTemp("", "compat-"+name+"-")
	if err != nil {
		return "", err
	}
	if err := copyFile(filepath.Join(corpus, name+".yaml"), filepath.Join(dir, name+".yaml")); err != nil {
		return "", err
	}
	libs, _ := filepath.Glob(filepath.Join(corpus, "lib", "*.yaml"))
	if err := os.MkdirAll(filepath.Join(dir, ".loops"), 0o755); err != nil {
		return "", err
	}
	for _, l := range libs {
		// ll-loop looks for a sub-loop beside the loop when it checks the
		// file, and in .loops when it runs it.
		for _, to := range []string{filepath.Join(dir, ".loops", filepath.Base(l)), filepath.Join(dir, filepath.Base(l))} {
			if err := copyFile(l, to); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// RunLooprun runs the corpus loop name with the looprun binary bin.
func RunLooprun(bin, corpus, name string) (Outcome, error) {
	dir, err := prepare(corpus, name)
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(dir)
	args, err := runArgs(corpus, name)
	if err != nil {
		return Outcome{}, err
	}
	code, err := run(dir, withTools(corpus, os.Environ()), bin, append([]string{"run", "-q", name + ".yaml"}, args...)...)
	if err != nil {
		return Outcome{}, err
	}
	state := filepath.Join(dir, ".loops", ".running", name+".state.json")
	events := filepath.Join(dir, ".loops", ".running", name+".events.jsonl")
	if _, err := os.Stat(state); os.IsNotExist(err) {
		return read(dir, code, "", "") // refused before it started
	}
	return read(dir, code, state, events)
}

// RunOriginal runs the corpus loop name with little-loops' ll-loop:
// python with PYTHONPATH=scripts (the scripts directory of its repository).
func RunOriginal(python, scripts, corpus, name string) (Outcome, error) {
	dir, err := prepare(corpus, name)
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(dir)
	env := append(withTools(corpus, os.Environ()), "PYTHONPATH="+scripts)
	args, err := runArgs(corpus, name)
	if err != nil {
		return Outcome{}, err
	}
	code, err := run(dir, env, python, append([]string{"-m", "little_loops.cli.loop", "run", name + ".yaml", "--no-lock"}, args...)...)
	if err != nil {
		return Outcome{}, err
	}
	// The run is archived under .history once it ends; a resumable one
	// stays in .running.
	states, _ := filepath.Glob(filepath.Join(dir, ".loops", ".history", "*-"+name, "state.json"))
	if len(states) == 1 {
		return read(dir, code, states[0], filepath.Join(filepath.Dir(states[0]), "events.jsonl"))
	}
	states, _ = filepath.Glob(filepath.Join(dir, ".loops", ".running", name+".yaml-*.state.json"))
	switch len(states) {
	case 0:
		return read(dir, code, "", "") // refused before it started
	case 1:
		return read(dir, code, states[0], strings.TrimSuffix(states[0], ".state.json")+".events.jsonl")
	}
	return Outcome{}, fmt.Errorf("%s: more than one state file of the run (%v)", name, states)
}

// runArgs are the arguments both CLIs' run gets after the loop file: the
// lines of NAME.args, one argument a line, as written (spaces kept), when
// the corpus has that file.
func runArgs(corpus, name string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(corpus, name+".args"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), nil
}

// withTools puts the corpus's programs (bin: an mcp-call) first on the
// PATH of env.
func withTools(corpus string, env []string) []string {
	bin, err := filepath.Abs(filepath.Join(corpus, "bin"))
	if err != nil {
		return env
	}
	out := make([]string, 0, len(env)+1)
	path := bin
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path += string(os.PathListSeparator) + p
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PATH="+path)
}

// run runs a command in dir, at most a minute, and returns its exit code.
func run(dir string, env []string, name string, args ...string) (int, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), nil
		}
		return 0, err
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("%s %v: still running after a minute:\n%s", name, args, out.String())
	}
}

// read sums up a finished run from its state file and event log ("" for
// a run refused before it started: then only its exit code and files).
func read(dir string, code int, statePath, eventsPath string) (Outcome, error) {
	o := Outcome{ExitCode: code, Captured: map[string]string{}, Files: map[string]string{}}
	if statePath == "" {
		return o, files(dir, o.Files)
	}
	var st struct {
		CurrentState string                     `json:"current_state"`
		Captured     map[string]json.RawMessage `json:"captured"`
	}
	b, err := os.ReadFile(statePath)
	if err != nil {
		return o, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return o, fmt.Errorf("%s: %w", statePath, err)
	}
	o.FinalState = st.CurrentState
	for name, raw := range st.Captured {
		captured(o.Captured, name, raw)
	}
	evs, err := os.ReadFile(eventsPath)
	if err != nil {
		return o, err
	}
	for _, line := range strings.Split(string(evs), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["depth"] != nil {
			continue // a sub-loop's event, or no event
		}
		switch e["event"] {
		case "route":
			o.Routes = append(o.Routes, fmt.Sprintf("%v->%v", e["from"], e["to"]))
		case "action_complete":
			if _, ok := e["input_tokens"]; ok {
				o.Usage = append(o.Usage, fmt.Sprintf("input=%v output=%v cache_read=%v cache_creation=%v model=%v",
					e["input_tokens"], e["output_tokens"], e["cache_read_tokens"], e["cache_creation_tokens"], e["model"]))
			}
		case "loop_complete":
			o.TerminatedBy, _ = e["terminated_by"].(string)
			if n, ok := e["iterations"].(float64); ok {
				o.Iterations = int(n)
			}
		}
	}
	o.UsageRows = runRows(dir, "usage.jsonl")
	o.Messages = runRows(dir, "messages.jsonl")
	return o, files(dir, o.Files)
}

// timestamp matches the timestamp of a usage or messages row.
var timestamp = regexp.MustCompile(`"timestamp": "[^"]*"`)

// runRows reads the rows of the file name in the run directories
// (.loops/runs/*), their timestamps blanked.
func runRows(dir, name string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, ".loops", "runs", "*", name))
	sort.Strings(paths)
	var rows []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			rows = append(rows, timestamp.ReplaceAllString(line, `"timestamp": ""`))
		}
	}
	return rows
}

// files reads the files a run wrote in dir (not the loop files, not
// hidden directories such as .loops).
func files(dir string, into map[string]string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() && rel != "." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir // .loops, ll-loop's .ll
		}
		if d.IsDir() || filepath.Dir(rel) == "." && strings.HasSuffix(rel, ".yaml") {
			return nil
		}
		b, err := root.ReadFile(rel)
		if err != nil {
			return err
		}
		into[rel] = string(b)
		return nil
	})
}

// captured flattens a state file's capture: its output, or for a
// sub-loop state how the child ended and the child's outputs; a
// sub-loop's event stream only as one.
func captured(into map[string]string, name string, raw json.RawMessage) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	var s string
	if by, ok := m["terminated_by"]; ok && json.Unmarshal(by, &s) == nil {
		into[name+".terminated_by"] = s
	} else if out, ok := m["output"]; ok && json.Unmarshal(out, &s) == nil {
		if strings.HasPrefix(s, `{"event"`) {
			// A sub-loop's event stream: its timestamps differ from run
			// to run, and looprun's child writes no action_output
			// events. Only that it is one is compared.
			s = "(a sub-loop's event stream)"
		}
		into[name] = s
	}
	for k, v := range m {
		if len(v) > 0 && v[0] == '{' {
			captured(into, name+"."+k, v)
		}
	}
}

// Diff lists how got differs from want, one line each.
func Diff(want, got Outcome) []string {
	var d []string
	add := func(what string, w, g any) {
		d = append(d, fmt.Sprintf("%s: ll-loop %v, looprun %v", what, w, g))
	}
	if want.ExitCode != got.ExitCode {
		add("exit code", want.ExitCode, got.ExitCode)
	}
	if want.FinalState != got.FinalState {
		add("final state", want.FinalState, got.FinalState)
	}
	if want.Iterations != got.Iterations {
		add("iterations", want.Iterations, got.Iterations)
	}
	if want.TerminatedBy != got.TerminatedBy {
		add("terminated_by", want.TerminatedBy, got.TerminatedBy)
	}
	if !slices.Equal(want.Routes, got.Routes) {
		add("routes", want.Routes, got.Routes)
	}
	for _, k := range slices.Sorted(maps.Keys(want.Captured)) {
		if g, ok := got.Captured[k]; !ok || g != want.Captured[k] {
			add("captured "+k, fmt.Sprintf("%q", want.Captured[k]), fmt.Sprintf("%q", g))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got.Captured)) {
		if _, ok := want.Captured[k]; !ok {
			add("captured "+k, "nothing", fmt.Sprintf("%q", got.Captured[k]))
		}
	}
	if !slices.Equal(want.Usage, got.Usage) {
		add("action_complete usage", want.Usage, got.Usage)
	}
	if !slices.Equal(want.UsageRows, got.UsageRows) {
		add("usage.jsonl", strings.Join(want.UsageRows, "\n"), strings.Join(got.UsageRows, "\n"))
	}
	if !slices.Equal(want.Messages, got.Messages) {
		add("messages.jsonl", strings.Join(want.Messages, "\n"), strings.Join(got.Messages, "\n"))
	}
	if !maps.Equal(want.Files, got.Files) {
		add("files", want.Files, got.Files)
	}
	return d
}

// ReadGolden reads the outcome ll-loop gave for name.
func ReadGolden(corpus, name string) (Outcome, error) {
	var o Outcome
	b, err := os.ReadFile(filepath.Join(corpus, name+".golden.json"))
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}

// WriteGolden keeps the outcome ll-loop gave for name.
func WriteGolden(corpus, name string, o Outcome) error {
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(corpus, name+".golden.json"), append(b, '\n'), 0o644)
}
