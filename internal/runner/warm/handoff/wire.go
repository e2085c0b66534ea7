// Package handoff is how the operator hands a run's steps to its warm
// runner Pod and reads their results back: a small HTTP protocol between
// the operator and `entrypoint serve` in the Pod, every request and every
// answer signed with the run's runner key (HMAC-SHA256), so that neither
// end takes a step or a result from anything else (another Pod, a process
// of the run's own steps, someone on the Pod network).
//
// A step has an id (RUN.ITERATION.RETRY). The server runs a step of one id
// once: handing it over again (the operator restarted, a request was
// retried) answers with what it recorded. It keeps a ledger of its steps on
// its own volume, each line signed, so a restarted server knows which steps
// it ran, and that a step that was running when it died is lost.
package handoff

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Port is where the runner listens in its Pod.
const Port = 7464

// KeyEnv carries the run's runner key (hex) to the server, from a Secret
// of the run; the server drops it from its environment and passes it to no
// step.
const KeyEnv = "LOOPRUN_RUNNER_KEY"

// KeyBytes is the size of a runner key.
const KeyBytes = 32

// Headers of a signed request and answer.
const (
	headerTime      = "X-Looprun-Time"
	headerSignature = "X-Looprun-Signature"
)

// Step is a step as the operator hands it over: the wrapper's arguments
// (`entrypoint --result-fd 3 ARGS...`, the action after "--"), the
// variables it adds to the Pod's environment, and its working directory.
type Step struct {
	State     string   `json:"state"`
	Iteration int32    `json:"iteration"`
	Retry     int32    `json:"retry,omitempty"`
	Args      []string `json:"args"`
	Env       []string `json:"env,omitempty"`
	Dir       string   `json:"dir,omitempty"`
}

// The phases of a step.
const (
	// Running: the step runs.
	Running = "Running"
	// Done: the step ended; Result holds the wrapper's result.
	Done = "Done"
	// Lost: the step was running when the server died; it never ended.
	Lost = "Lost"
)

// Status is what the server says of a step.
type Status struct {
	ID    string `json:"id"`
	Phase string `json:"phase"`
	// Result is the wrapper's result (what a step Pod writes to its
	// termination message), once Done.
	Result json.RawMessage `json:"result,omitempty"`
	// ExitCode is the wrapper's own exit code, once Done.
	ExitCode int `json:"exitCode"`
	// NoResult says why a Done step has no Result (the wrapper was
	// killed before it wrote one).
	NoResult string    `json:"noResult,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
}

// stepID is what a step id may be.
var stepID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// StepID is the id of a run's step: RUN.ITERATION.RETRY.
func StepID(run string, iteration, retry int32) string {
	return fmt.Sprintf("%s.%d.%d", run, iteration, retry)
}

// NewKey makes a runner key.
func NewKey() (string, error) {
	b := make([]byte, KeyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// ParseKey reads a runner key.
func ParseKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(s)
	if err != nil || len(k) != KeyBytes {
		return nil, fmt.Errorf("a runner key is %d bytes in hex", KeyBytes)
	}
	return k, nil
}

// sign is the signature of one message: its kind and fields, then the
// SHA-256 of its body.
func sign(key []byte, kind string, fields []string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(kind))
	for _, f := range fields {
		m.Write([]byte{'\n'})
		m.Write([]byte(strconv.Quote(f)))
	}
	sum := sha256.Sum256(body)
	m.Write([]byte{'\n'})
	m.Write(sum[:])
	return hex.EncodeToString(m.Sum(nil))
}

// verify checks a signature in constant time.
func verify(key []byte, sig, kind string, fields []string, body []byte) bool {
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(sign(key, kind, fields, body))
	return hmac.Equal(got, want)
}

// requestFields are what a request's signature covers beside its body.
func requestFields(method, uri, at string) []string { return []string{method, uri, at} }

// answerFields are what an answer's signature covers: the request it
// answers (so that an answer for one step cannot pass for another's, nor
// an old answer for a new request) and its status code.
func answerFields(method, uri, at string, code int) []string {
	return []string{method, uri, at, strconv.Itoa(code)}
}
