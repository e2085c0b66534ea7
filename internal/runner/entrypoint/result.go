// Package entrypoint is the in-pod wrapper's result: what cmd/entrypoint
// writes to its container's termination message once the action's process
// (run by internal/runner/process, as the local runner runs it) ended, and
// how the pod runner reads it back.
package entrypoint

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/looprun/looprun/internal/action"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner/process"
)

// MaxMessageBytes is the size limit of a container's termination message.
const MaxMessageBytes = 4096

// Result is what the wrapper writes to the termination message: everything
// the controller needs to complete the step, in at most MaxMessageBytes.
type Result struct {
	ExitCode        int    `json:"exitCode"`
	DurationMs      int64  `json:"durationMs"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	IdledOut        bool   `json:"idledOut,omitempty"`
	// CannotStart says why the command could not start: the image lacks
	// the shell or the agent CLI, say.
	CannotStart string           `json:"cannotStart,omitempty"`
	Verdict     *evaluate.Result `json:"verdict,omitempty"`
	// Signal is the signal in the complete stdout (FATAL_ERROR:, ...);
	// SignalScanned says the wrapper looked (an older one did not).
	Signal        *action.Signal `json:"signal,omitempty"`
	SignalScanned bool           `json:"signalScanned,omitempty"`
	// Probe is what the action's probe printed (ProbeEnv), its output
	// cut to ProbeOutputBytes; the hash is of all of it.
	Probe *Probe `json:"probe,omitempty"`
	// Usage is what an agent action reported it used (AgentStreamEnv).
	Usage *agentstream.Usage `json:"usage,omitempty"`
}

// Probe is the result of an action's probe.
type Probe struct {
	ExitCode int    `json:"exitCode"`
	SHA256   string `json:"sha256"`
	Output   string `json:"output"`
	Stderr   string `json:"stderr,omitempty"`
}

// RunDirEnv names the run's run_dir (action.Action.RunDir), which the
// entrypoint makes before the action starts.
const RunDirEnv = "LOOPRUN_RUN_DIR"

// AgentStreamEnv says the command prints an agent CLI's stream-json
// (process.Spec.AgentStream): AgentStreamPrompt for an agent action,
// AgentStreamShell for a command that runs the agent. The wrapper appends
// the usage to the run_dir's usage.jsonl as well.
const AgentStreamEnv = "LOOPRUN_AGENT_STREAM"

// The values of AgentStreamEnv.
const (
	AgentStreamPrompt = "prompt"
	AgentStreamShell  = "shell"
)

// ProbeEnv carries an action's probe (action.Action.Probe) to the
// wrapper, which runs it after the action.
const ProbeEnv = "LOOPRUN_PROBE"

// Bounds on a probe in the termination message.
const (
	ProbeOutputBytes = 1 << 10
	probeStderrBytes = 256
)

// NewProbe keeps what the termination message can hold of a probe.
func NewProbe(p *action.ProbeResult) *Probe {
	if p == nil {
		return nil
	}
	out := p.Output
	if len(out) > ProbeOutputBytes {
		out = out[len(out)-ProbeOutputBytes:]
		if i := strings.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	return &Probe{ExitCode: p.ExitCode, SHA256: p.SHA256, Output: out, Stderr: action.Tail(p.Stderr, probeStderrBytes)}
}

// ReasonCannotStart is the failure reason of an action whose command could
// not start in its Pod.
const ReasonCannotStart = "CannotStart"

// NewResult sums up how the action's process ended.
func NewResult(r process.Result) Result {
	return Result{
		ExitCode: r.ExitCode, DurationMs: r.Duration.Milliseconds(),
		Stdout: r.Stdout, StdoutTruncated: r.StdoutTruncated,
		Stderr: r.Stderr, StderrTruncated: r.StderrTruncated,
		TimedOut: r.TimedOut, IdledOut: r.IdledOut, CannotStart: r.CannotStart, Verdict: r.Verdict,
		Signal: r.Signal, SignalScanned: true, Usage: r.Usage,
	}
}

// Encode renders r as JSON within MaxMessageBytes: detail values are capped
// first, then the stderr tail, then the stdout tail are shortened, and the
// details dropped, until it fits.
func (r Result) Encode() []byte {
	if r.Verdict != nil {
		r.Verdict = capDetails(r.Verdict)
	}
	for {
		b, err := json.Marshal(r)
		if err != nil {
			b = []byte(fmt.Sprintf(`{"exitCode":%d,"durationMs":%d,"stdout":"","stderr":%q}`, r.ExitCode, r.DurationMs, "cannot encode the result: "+err.Error()))
		}
		if len(b) <= MaxMessageBytes {
			return b
		}
		over := len(b) - MaxMessageBytes
		switch {
		case r.Stderr != "":
			r.Stderr, r.StderrTruncated = shorten(r.Stderr, over), true
		case r.Stdout != "":
			r.Stdout, r.StdoutTruncated = shorten(r.Stdout, over), true
		case r.Verdict != nil && len(r.Verdict.Details) > 0:
			r.Verdict = &evaluate.Result{Verdict: r.Verdict.Verdict}
		case r.Verdict != nil && len(r.Verdict.Verdict) > 256:
			r.Verdict = &evaluate.Result{Verdict: action.Tail(r.Verdict.Verdict, 256)}
		default:
			return []byte(fmt.Sprintf(`{"exitCode":%d,"durationMs":%d,"stdout":"","stderr":""}`, r.ExitCode, r.DurationMs))
		}
	}
}

// detailBytes caps one detail value in the termination message.
const detailBytes = 256

// capDetails shortens detail values that are long once encoded.
func capDetails(v *evaluate.Result) *evaluate.Result {
	out := &evaluate.Result{Verdict: v.Verdict, Details: make(map[string]any, len(v.Details))}
	for k, d := range v.Details {
		if b, err := json.Marshal(d); err == nil && len(b) > detailBytes {
			s, ok := d.(string)
			if !ok {
				s = string(b)
			}
			d = shorten(s, len(b)-detailBytes)
		}
		out.Details[k] = d
	}
	return out
}

// shorten drops the front of s so that its JSON encoding shrinks by about
// over bytes, keeping whole characters (escaped characters cost more than
// one byte, so the cut is proportional to the encoded size).
func shorten(s string, over int) string {
	b, _ := json.Marshal(s)
	enc := len(b)
	if enc <= over+16 {
		return ""
	}
	keep := int(float64(len(s)) * float64(enc-over-16) / float64(enc))
	if keep <= 0 {
		return ""
	}
	return action.Tail(s, keep)
}

// Decode reads a termination message back into an action result.
func Decode(msg string) (action.Result, error) {
	var r Result
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return action.Result{}, fmt.Errorf("termination message is not a wrapper result: %w", err)
	}
	res := action.Result{
		Output: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode,
		Duration:        time.Duration(r.DurationMs) * time.Millisecond,
		OutputTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		Verdict: r.Verdict, Signal: r.Signal, SignalScanned: r.SignalScanned, Usage: r.Usage, TimedOut: r.TimedOut,
		IdledOut: r.IdledOut,
	}
	if p := r.Probe; p != nil {
		res.Probe = &action.ProbeResult{ExitCode: p.ExitCode, SHA256: p.SHA256, Output: p.Output, Stderr: p.Stderr}
	}
	if r.CannotStart != "" {
		// All a Loop's author sees is its status: it says why.
		res.Failure = &action.Failure{Reason: ReasonCannotStart, Message: r.CannotStart + " (in the action's image)"}
	}
	return res, nil
}
