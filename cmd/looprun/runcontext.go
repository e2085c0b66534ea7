package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pycompat"
	"github.com/looprun/looprun/internal/safefile"
)

// A local run's context gets what little-loops' runner gives it, in its
// order: the positional input, then --context and --set (which win), then
// run_dir, input_hash and max_steps, each unless already set.

// setInput puts a run's positional input into the context: a JSON object
// whose keys the context has updates those keys; anything else is stored,
// as text, under key.
func setInput(spec *v1alpha1.LoopSpec, key, raw string) {
	var obj map[string]any
	if json.Unmarshal([]byte(raw), &obj) == nil {
		matched := false
		for k, v := range obj {
			if _, ok := spec.Context[k]; ok {
				spec.SetContext(k, v)
				matched = true
			}
		}
		if matched {
			return
		}
	}
	spec.SetContext(key, raw)
}

// setContext sets the context variables of --set KEY=VALUE (and run's
// --context), each KEY a name; the value is text.
func setContext(spec *v1alpha1.LoopSpec, kvs []string) error {
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = pycompat.Strip(k), pycompat.Strip(v) // " k = v " sets k to v, as in ll-loop
		if !ok || !interpolate.IsName(k) {
			return fmt.Errorf("--set %q: want KEY=VALUE, KEY a name (letters, digits, '_', '-'); ${context.KEY} reads it", kv)
		}
		spec.SetContext(k, v)
	}
	return nil
}

// setRunContext gives the run's context what a runner gives it, each
// unless set (executor.RunContext): run_dir (DIR/runs/RUN_ID/ under the
// loops directory, absolute), input_hash and max_steps; it returns run_dir.
func setRunContext(spec *v1alpha1.LoopSpec, loopsDir, runID string) (string, error) {
	if err := setDefaults(spec, loopsDir, runID, false); err != nil {
		return "", err
	}
	return runDirOf(spec)
}

// setDefaults sets the context a runner gives a run whose run_dir is
// DIR/runs/LEAF/ under the loops directory.
func setDefaults(spec *v1alpha1.LoopSpec, loopsDir, leaf string, simulated bool) error {
	abs, err := filepath.Abs(loopsDir)
	if err != nil {
		return err
	}
	rc := executor.RunContext{RunDir: filepath.Join(abs, "runs", leaf) + "/", NoMaxSteps: simulated}
	for k, v := range rc.Defaults(spec) {
		spec.SetContext(k, v)
	}
	return nil
}

// runDirOf is the run's run_dir, which must be a directory name.
func runDirOf(spec *v1alpha1.LoopSpec) (string, error) {
	runDir, ok := contextValue(spec, "run_dir").(string)
	if !ok || runDir == "" {
		return "", fmt.Errorf("context variable run_dir must be a directory name")
	}
	return runDir, nil
}

// contextValue is the decoded value of a context variable; nil when unset.
func contextValue(spec *v1alpha1.LoopSpec, key string) any {
	j, ok := spec.Context[key]
	if !ok {
		return nil
	}
	var v any
	if json.Unmarshal(j.Raw, &v) != nil {
		return nil
	}
	return v
}

// setHow says, in preflight's refusal, how a command gives a loop a
// context variable and its input.
type setHow struct {
	cmd   string // the command line up to its flags: looprun run FILE
	set   string // the flag that sets a variable: --context
	input string // how the input is given: VALUE
}

// runHow says how looprun run gives a loop a variable or its input.
func runHow(name string) setHow {
	return setHow{cmd: "looprun run " + name, set: "--context", input: "VALUE"}
}

// preflight refuses a run that would stop at its first missing variable:
// every ${context.X} of an action or a judge's prompt without a default
// must be set, and every required input must be set and true as Python
// has it (not empty, false or 0). given are the variables the run gets
// besides the loop's context.
func preflight(lf *loopfile.File, how setHow, given ...string) error {
	spec := &lf.Loop.Spec
	missing := map[string][]string{} // variable -> where it is used
	for _, sn := range slices.Sorted(maps.Keys(spec.States)) {
		st := spec.States[sn]
		fields := map[string]string{"action": st.Action}
		if st.Evaluate != nil {
			fields["evaluate.prompt"] = st.Evaluate.Prompt
		}
		for _, f := range slices.Sorted(maps.Keys(fields)) {
			for _, r := range interpolate.References(fields[f]) {
				if r.Namespace != "context" || r.Guarded || len(r.Path) == 0 {
					continue
				}
				if _, ok := spec.Context[r.Path[0]]; !ok && !slices.Contains(given, r.Path[0]) {
					where := fmt.Sprintf("state %q %s", sn, f)
					if !slices.Contains(missing[r.Path[0]], where) {
						missing[r.Path[0]] = append(missing[r.Path[0]], where)
					}
				}
			}
		}
	}
	var msgs []string
	for _, k := range slices.Sorted(maps.Keys(missing)) {
		msgs = append(msgs, fmt.Sprintf("${context.%s} is not set (%s): set it with %s %s %s=VALUE",
			k, strings.Join(missing[k], ", "), how.cmd, how.set, k))
	}
	for _, k := range lf.RequiredInputs {
		// As little-loops: a value Python counts false (false, 0, "",
		// [], {}) is no input.
		if v := contextValue(spec, k); !evaluate.Truthy(v) {
			given := ""
			if v != nil && v != "" {
				given = fmt.Sprintf(" (it is %s, which counts as none)", spec.Context[k].Raw)
			}
			msgs = append(msgs, fmt.Sprintf("loop %s needs input %q%s: pass it as %s %s (or %s %s=VALUE)", lf.Loop.Name, k, given, how.cmd, how.input, how.set, k))
		}
	}
	if len(msgs) > 0 {
		return &exitError{code: 1, msg: strings.Join(msgs, "\n")}
	}
	return nil
}

// reserveRunID picks the id of a new run of the loop called name,
// NAME-YYYYMMDDTHHMMSS, and reserves it by making its directory,
// <loops-dir>/runs/<id>/, exclusively: a run started in the same second as
// one before gets the first free suffix (-2, -3, ...), so no two runs share
// an id, and with it a sub-loop's child or a run_dir. runs/ is refused if
// it is a symbolic link. release removes the directory while it is empty
// (a run refused before it started).
func reserveRunID(loopsDir, name string, now time.Time) (id string, release func(), err error) {
	runs, err := safefile.Dir(loopsDir, "runs")
	if err != nil {
		return "", nil, fmt.Errorf("create run_dir: %w", err)
	}
	base := name + "-" + now.Format("20060102T150405")
	for n := 1; n <= maxSameSecondRuns; n++ {
		id = base
		if n > 1 {
			id = fmt.Sprintf("%s-%d", base, n)
		}
		dir := filepath.Join(runs, id)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return id, func() { _ = os.Remove(dir) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", nil, fmt.Errorf("create run_dir: %w", err)
		}
	}
	return "", nil, fmt.Errorf("create run_dir: %d runs of %s started in the second %s; wait a second", maxSameSecondRuns, name, now.Format(time.DateTime))
}

// maxSameSecondRuns bounds the runs of one loop that may start in one second.
const maxSameSecondRuns = 1000

// makeRunDir creates run_dir, as little-loops does before a run.
func makeRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run_dir: %w", err)
	}
	return nil
}
