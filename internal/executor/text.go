package executor

import (
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/action"
)

// asText is an action's result as ll-loop reads it, for a little-loops
// file: Python reads an action's output through text pipes, whose
// universal newlines turn \r\n and a lone \r into \n, before it judges,
// captures or hands it on as ${prev.output}. A verdict the runner made
// over the untranslated output is dropped, to be made again here over the
// text, unless the runner saw more than the tail the result keeps.
//
// An agent's stderr is its lines joined, without a newline after the
// last. An action stopped at its timeout has its own stderr, or when it
// printed none, "Action timed out" ("Action idle-timed out" at its idle
// timeout; for an MCP call "MCP call timed out", ll-loop's words though
// its own run does not outlive the kill) in place of looprun's notice; an
// agent stopped so has only that stderr, and no output.
func (t *turn) asText(res *ActionResult) *ActionResult {
	if !t.m.opts.LittleLoops || res == nil {
		return res
	}
	out, errs := universalNewlines(res.Output), universalNewlines(res.Stderr)
	agent, what := false, "Action"
	if st, ok := t.m.spec.States[t.run.CurrentState]; ok {
		agent = st.IsAgent()
		if st.ActionType == v1alpha1.ActionMCP {
			what = "MCP call"
		}
	}
	verdict := res.Verdict
	switch {
	case res.TimedOut:
		errs = action.WithoutTimeoutNotice(errs)
		if agent {
			out, errs = "", ""
		}
		if errs == "" {
			errs = what + " timed out"
			if res.IdledOut {
				errs = what + " idle-timed out"
			}
		}
		if agent {
			verdict = nil // judged again, over no output
		}
	case agent:
		errs = strings.TrimSuffix(errs, "\n")
	}
	if out == res.Output && errs == res.Stderr && verdict == res.Verdict {
		return res
	}
	c := *res
	c.Output, c.Stderr, c.Verdict = out, errs, verdict
	if out != res.Output && !res.OutputTruncated {
		c.Verdict = nil
	}
	if out == "" {
		c.OutputTruncated = false
	}
	return &c
}

// universalNewlines is s with \r\n and a lone \r written as \n.
func universalNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}
