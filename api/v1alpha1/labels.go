package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations the operator puts on what it creates for a Loop
// (action Pods, event-log ConfigMaps, the workspace claim). Label values
// go through LabelValue.
const (
	// LabelLoop names the Loop an object belongs to.
	LabelLoop = "looprun.io/loop"
	// LabelRun names the run of an action Pod.
	LabelRun = "looprun.io/run"
	// LabelIteration is the iteration of an action Pod.
	LabelIteration = "looprun.io/iteration"
	// LabelRetry is set on the Pods of retries (spec.states[].retryPolicy).
	LabelRetry = "looprun.io/retry"
	// LabelState is the state of an action Pod.
	LabelState = "looprun.io/state"
	// LabelRunner marks a run's warm runner Pod (value "warm") and the
	// Secret holding its key.
	LabelRunner = "looprun.io/runner"
	// LabelEventLog marks event-log segments.
	LabelEventLog = "looprun.io/event-log"
	// LabelShard puts a Loop in the shard of the manager started with
	// --shard of that value; a Loop without it belongs to the manager
	// started without --shard. What the operator creates for a Loop
	// carries its Loop's shard.
	LabelShard = "looprun.io/shard"
	// AnnotationState holds the state's full name when LabelState had to
	// shorten it.
	AnnotationState = "looprun.io/state"
	// AnnotationTraceParent is a W3C traceparent under which a new run's
	// trace goes (a parent Loop sets it on its child; a tool that creates
	// a Loop may set it on it).
	AnnotationTraceParent = "looprun.io/traceparent"
	// LabelParent names the Loop whose sub-loop state made a child Loop.
	LabelParent = "looprun.io/parent"
	// LabelTemplate names the LoopTemplate a child Loop was made from.
	LabelTemplate = "looprun.io/template"
	// AnnotationTemplate holds that LoopTemplate's full name, which
	// LabelTemplate shortens past 63 characters.
	AnnotationTemplate = "looprun.io/template"
	// AnnotationAncestry lists the LoopTemplates a child Loop's ancestors
	// run, by their full names, outermost first, separated by '/': where a
	// cycle is found.
	AnnotationAncestry = "looprun.io/ancestry"
)

// ActionContainerName is the container of an action Pod that runs the
// action: `kubectl logs POD -c action` shows its output.
const ActionContainerName = "action"

// Annotations users (and the looprun CLI) set on a Loop.
const (
	// RequestAnnotation asks a running Loop for something once: "stop"
	// or "rewind:<iteration>", optionally followed by "@<anything>" to
	// make a repeated request differ. status.lastRequest records what was
	// done. StopRequest and RewindRequest write one; ParseRequest reads it.
	RequestAnnotation = "looprun.io/request"
	// ImportingAnnotation holds a Loop back while looprun import writes
	// its status and event log; the operator leaves it alone until the
	// annotation is removed.
	ImportingAnnotation = "looprun.io/importing"
	// ApprovalMessageAnnotation is what the person answering an approval
	// state says, read with an approve or reject request.
	ApprovalMessageAnnotation = "looprun.io/approval-message"
	// ApprovedByAnnotation names who made the approve or reject request,
	// as the API server authenticated them: the chart's admission policy
	// admits the request only when it does, from a user holding the verb
	// approve on the Loop.
	ApprovedByAnnotation = "looprun.io/approved-by"
)

// Request verbs of RequestAnnotation.
const (
	// RequestStop ends the run at once (phase Interrupted, terminatedBy stopped).
	RequestStop = "stop"
	// RequestRewind goes back to a checkpoint: rewind:N, or the newest without N.
	RequestRewind = "rewind"
	// RequestApprove and RequestReject answer the approval state the Loop
	// waits in (ApprovalMessageAnnotation says why).
	RequestApprove = "approve"
	RequestReject  = "reject"
)

// StopRequest is the annotation value that stops a Loop; nonce makes a
// repeated request differ from the last.
func StopRequest(nonce string) string { return withNonce(RequestStop, nonce) }

// RewindRequest is the annotation value that rewinds a Loop to the
// checkpoint of iteration.
func RewindRequest(iteration int32, nonce string) string {
	return withNonce(fmt.Sprintf("%s:%d", RequestRewind, iteration), nonce)
}

// ApprovalTarget names the approval an answer answers: the run, the
// state waiting and the iteration it waits at. An answer that names
// another approval than the one waiting (a stale page, a second approver,
// an answer meant for an earlier question) is refused.
type ApprovalTarget struct {
	RunID     string
	State     string
	Iteration int32
}

// WaitingApproval is the approval the run waits for, as an answer names
// it; false when it waits for none (or has ended).
func (r *RunState) WaitingApproval() (ApprovalTarget, bool) {
	a := r.Action
	if a == nil || a.Approval == nil || r.Phase.IsFinished() {
		return ApprovalTarget{}, false
	}
	return ApprovalTarget{RunID: r.RunID, State: a.State, Iteration: a.Iteration}, true
}

// String is the target as people read it.
func (t ApprovalTarget) String() string {
	return fmt.Sprintf("state %s at iteration %d of run %s", t.State, t.Iteration, t.RunID)
}

// ApprovalRequest is the annotation value that answers the approval t:
// approve:ITERATION:RUN:STATE or reject:…, the run and state
// query-escaped, then the nonce.
func ApprovalRequest(approved bool, t ApprovalTarget, nonce string) string {
	verb := RequestReject
	if approved {
		verb = RequestApprove
	}
	return withNonce(fmt.Sprintf("%s:%d:%s:%s", verb, t.Iteration, url.QueryEscape(t.RunID), url.QueryEscape(t.State)), nonce)
}

// ParseApprovalTarget reads the approval an approve or reject request
// names; false when it names none (or is no such request).
func ParseApprovalTarget(s string) (ApprovalTarget, bool) {
	req, _, _ := strings.Cut(s, "@")
	parts := strings.SplitN(strings.TrimRightFunc(req, unicode.IsSpace), ":", 4)
	if len(parts) != 4 || (parts[0] != RequestApprove && parts[0] != RequestReject) {
		return ApprovalTarget{}, false
	}
	it, err := strconv.ParseInt(parts[1], 10, 32)
	run, err1 := url.QueryUnescape(parts[2])
	state, err2 := url.QueryUnescape(parts[3])
	if err != nil || err1 != nil || err2 != nil || it < 0 || run == "" || state == "" {
		return ApprovalTarget{}, false
	}
	return ApprovalTarget{RunID: run, State: state, Iteration: int32(it)}, true
}

func withNonce(req, nonce string) string {
	if nonce == "" {
		return req
	}
	return req + "@" + nonce
}

// ParseRequest reads a RequestAnnotation value: its verb (RequestStop,
// RequestRewind, RequestApprove or RequestReject) and rewind's iteration (nil: the newest checkpoint). An
// unknown verb or a bad iteration is an error that says what is wanted.
//
// An answer (approve, reject) must be the value's very start, with no
// white space before it: the chart's admission policy tells an answer from
// other requests by that start (a value that starts with approve or
// reject), and the two must never disagree, or a user the policy does not
// check could answer. A value the policy did not take for an answer is
// never read as one here.
func ParseRequest(s string) (verb string, iteration *int32, err error) {
	req, _, _ := strings.Cut(s, "@")
	verb, arg, _ := strings.Cut(strings.TrimSpace(req), ":")
	switch verb {
	case RequestApprove, RequestReject:
		if !strings.HasPrefix(s, verb) {
			return "", nil, fmt.Errorf("%s: %q: an %s or %s request must start the value, with nothing before it", RequestAnnotation, s, RequestApprove, RequestReject)
		}
		return verb, nil, nil
	case RequestStop:
		return verb, nil, nil
	case RequestRewind:
		if arg == "" {
			return verb, nil, nil
		}
		n, err := strconv.ParseInt(arg, 10, 32)
		if err != nil || n < 0 {
			return verb, nil, fmt.Errorf("%s: %q is not an iteration", RequestAnnotation, arg)
		}
		it := int32(n)
		return verb, &it, nil
	}
	return verb, nil, fmt.Errorf("%s: unknown request %q (want %s, %s:ITERATION, %s or %s)", RequestAnnotation, s, RequestStop, RequestRewind, RequestApprove, RequestReject)
}

// StateOf is the state an action Pod ran, from its labels and annotations:
// AnnotationState when LabelState had to shorten the name, else the label.
func StateOf(labels, annotations map[string]string) string {
	if s := annotations[AnnotationState]; s != "" {
		return s
	}
	return labels[LabelState]
}

// LabelValue makes s a valid label value: unchanged when it is one,
// otherwise with the invalid characters replaced, shortened, and suffixed
// with a hash of s (so two long names do not share a value).
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !isLabelChar(c) {
			b[i] = '-'
		}
	}
	v := string(b)
	if len(v) > validation.LabelValueMaxLength-9 {
		v = v[:validation.LabelValueMaxLength-9]
	}
	if v = strings.Trim(v, "-_."); v == "" {
		return ShortHash(s)
	}
	return v + "-" + ShortHash(s)
}

func isLabelChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// ShortHash is 8 hex digits of the SHA-256 of s, for names shortened to fit.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// ChildLabels are the labels of what the operator creates for a Loop: its
// name and, when it has one, its shard.
func ChildLabels(loop *Loop) map[string]string {
	l := map[string]string{LabelLoop: LabelValue(loop.Name)}
	if shard, ok := loop.Labels[LabelShard]; ok {
		l[LabelShard] = shard
	}
	return l
}
