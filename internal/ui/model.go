// Package ui is the web view of `looprun ui`: JSON and server-sent events
// over the same readers the CLI uses (a local run's state file and JSONL
// log), and the front end that draws them (web/, built into dist/ and
// embedded). It only reads.
package ui

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Summary is a loop in the list.
type Summary struct {
	Source    string    `json:"source"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	Phase     string    `json:"phase"`
	State     string    `json:"state"`
	Iteration int32     `json:"iteration"`
	Started   time.Time `json:"started,omitzero"`
	Updated   time.Time `json:"updated,omitzero"`
}

// Node is a state of the loop's graph.
type Node struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // shell, agent, mcp, loop, approval, none
	Action   string `json:"action,omitempty"`
	Loop     string `json:"loop,omitempty"`
	Initial  bool   `json:"initial,omitempty"`
	Terminal bool   `json:"terminal,omitempty"`
	Failure  bool   `json:"failure,omitempty"`
	Visits   int    `json:"visits"`
}

// Edge is a way from one state to another, with how often the run took it.
type Edge struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Label string `json:"label"`
	Count int32  `json:"count"`
}

// Detail is a loop's page: its graph and where its run is.
type Detail struct {
	Summary
	Nodes         []Node          `json:"nodes"`
	Edges         []Edge          `json:"edges"`
	MaxIterations int32           `json:"maxIterations"`
	ElapsedMs     int64           `json:"elapsedMs"`
	TimeoutMs     int64           `json:"timeoutMs,omitempty"`
	TerminatedBy  string          `json:"terminatedBy,omitempty"`
	Message       string          `json:"message,omitempty"`
	Usage         *Usage          `json:"usage,omitempty"`
	Approval      *Approval       `json:"approval,omitempty"`
	ExitHook      *ExitHook       `json:"exitHook,omitempty"`
	LastSeq       int64           `json:"lastSeq"`
	States        map[string]Last `json:"states"`
	// Rewinds are the run's rewinds: the graph's counts and the timeline
	// are of the timeline the last one left, not of what they abandoned.
	Rewinds []Rewind `json:"rewinds,omitempty"`
}

// Usage is what the run's agents used.
type Usage struct {
	InputTokens  int64   `json:"inputTokens"`
	OutputTokens int64   `json:"outputTokens"`
	CostUSD      float64 `json:"costUSD"`
	MaxCostUSD   float64 `json:"maxCostUSD,omitempty"`
}

// Approval is the approval the run waits for: who may answer it, the
// command that does, and whether this viewer may answer it on the page.
type Approval struct {
	// Run, State and Iteration name the approval: an answer sends them
	// back, and is taken only while that one waits.
	Run       string `json:"run"`
	Iteration int32  `json:"iteration"`
	State     string `json:"state"`
	Message   string `json:"message,omitempty"`
	Command   string `json:"command"`
	Who       string `json:"who"`
	CanAnswer bool   `json:"canAnswer,omitempty"`
}

// Answered is an approval answered on the page.
type Answered struct {
	State     string `json:"state"`
	Iteration int32  `json:"iteration"`
	Approved  bool   `json:"approved"`
}

// Last is what a state last did: its action's output tail and its verdict.
type Last struct {
	Iteration int32          `json:"iteration"`
	ExitCode  *int64         `json:"exitCode,omitempty"`
	Output    string         `json:"output,omitempty"`
	Stderr    string         `json:"stderr,omitempty"`
	Verdict   string         `json:"verdict,omitempty"`
	Details   map[string]any `json:"details,omitempty"`
	// Question is what an approval state last asked, its templates
	// expanded (as the CLI prints it).
	Question string `json:"question,omitempty"`
	// Child is the run a sub-loop state last started (a Loop of the same
	// namespace in a cluster; a run beside it locally): its page is linked.
	Child string `json:"child,omitempty"`
}

// Visit is one row of the timeline: a state entered, its action, its
// verdict and where it went; Repeat counts the identical passes folded
// into it (the same states with the same verdicts, one after another).
type Visit struct {
	Seq        int64     `json:"seq"`
	Iteration  int32     `json:"iteration"`
	State      string    `json:"state"`
	At         time.Time `json:"at"`
	DurationMs int64     `json:"durationMs"`
	Action     string    `json:"action,omitempty"`
	ExitCode   *int64    `json:"exitCode,omitempty"`
	Verdict    string    `json:"verdict,omitempty"`
	Next       string    `json:"next,omitempty"`
	// Repeat passes of the Period visits ending with this one were folded
	// into them.
	Repeat int `json:"repeat,omitempty"`
	Period int `json:"period,omitempty"`
}

// graph is the loop's states and edges, with what the run did on them.
func graph(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, visits map[string]int) ([]Node, []Edge) {
	nodes, edges := []Node{}, []Edge{} // [], not null, for the page
	for _, name := range sortedStates(spec) {
		st := spec.States[name]
		n := Node{Name: name, Kind: kind(&st), Action: firstLines(st.Action, 2048), Loop: st.Loop, Initial: name == spec.Initial,
			Terminal: st.Terminal, Failure: st.Terminal && st.IsFailure(name), Visits: visits[name]}
		if n.Terminal && n.Visits == 0 && run.CurrentState == name && run.Phase.IsFinished() {
			n.Visits = 1 // a terminal state is reached, never entered as others are
		}
		nodes = append(nodes, n)
		seen := map[string]int{}
		for _, t := range executor.Targets(&st) {
			to := t.To
			if to == v1alpha1.CurrentStateToken {
				to = name
			}
			if _, ok := spec.States[to]; !ok {
				continue
			}
			label := t.Verdict
			if label == "" {
				label = t.Field
			}
			if i, ok := seen[to]; ok { // one edge per pair, its labels joined
				edges[i].Label += ", " + label
				continue
			}
			seen[to] = len(edges)
			edges = append(edges, Edge{From: name, To: to, Label: label, Count: run.EdgeRevisits[name+"->"+to]})
		}
	}
	return nodes, edges
}

// sortedStates are the states, the initial one first, then by name: a
// stable layout.
func sortedStates(spec *v1alpha1.LoopSpec) []string {
	names := slices.Sorted(maps.Keys(spec.States))
	if i := slices.Index(names, spec.Initial); i > 0 {
		names = append(append([]string{spec.Initial}, names[:i]...), names[i+1:]...)
	}
	return names
}

func kind(st *v1alpha1.State) string {
	switch {
	case st.Loop != "":
		return "loop"
	case st.Approval != nil:
		return "approval"
	case st.Action == "":
		return "none"
	case st.IsAgent():
		return "agent"
	case st.ActionType == v1alpha1.ActionMCP:
		return "mcp"
	}
	return "shell"
}

// firstLines cuts s to at most n bytes on a line boundary when it can.
func firstLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:n]
	if i := strings.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i]
	}
	return strings.ToValidUTF8(cut, "") + "\n…"
}
