package executor

import "strings"

// asText is an action's result as ll-loop reads it, for a little-loops
// file: Python reads an action's output through text pipes, whose
// universal newlines turn \r\n and a lone \r into \n, before it judges,
// captures or hands it on as ${prev.output}. A verdict the runner made
// over the untranslated output is dropped, to be made again here over the
// text, unless the runner saw more than the tail the result keeps.
func (t *turn) asText(res *ActionResult) *ActionResult {
	if !t.m.opts.LittleLoops || res == nil {
		return res
	}
	out, errs := universalNewlines(res.Output), universalNewlines(res.Stderr)
	if out == res.Output && errs == res.Stderr {
		return res
	}
	c := *res
	c.Output, c.Stderr = out, errs
	if out != res.Output && !res.OutputTruncated {
		c.Verdict = nil
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
