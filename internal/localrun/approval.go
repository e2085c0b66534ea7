package localrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/safefile"
)

// Approver answers a local run's approval states.
type Approver interface {
	// Await returns a person's answer to req, or nil once its deadline
	// passed. It returns ctx's error when ctx ends first.
	Await(ctx context.Context, req *executor.ApprovalRequest) (*executor.ApprovalAnswer, error)
}

// Answer is a person's answer to a local run's approval, as looprun approve
// and looprun reject write it beside the run's state file. Run, State and
// Iteration name the approval answered, so an answer never reaches a later
// one, nor another run's (one a killed run left).
type Answer struct {
	Run       string `json:"run"`
	State     string `json:"state"`
	Iteration int32  `json:"iteration"`
	Approved  bool   `json:"approved"`
	By        string `json:"by,omitempty"`
	Message   string `json:"message,omitempty"`
	At        string `json:"at,omitempty"`
}

// ErrNoApprovalWaiting is returned when a run waits for no approval.
var ErrNoApprovalWaiting = errors.New("waits for no approval")

// ErrStaleAnswer is returned for an answer to an approval the run no
// longer waits for.
var ErrStaleAnswer = errors.New("no longer waits for that approval")

// ErrAnswered is returned when the approval waiting has an answer the run
// has not read yet: a second answer would replace it unseen.
var ErrAnswered = errors.New("was answered already")

// WriteAnswer answers the approval the store's run waits for; with want,
// only that approval (the one the person was shown). A second answer to
// an approval whose first is not read yet is refused, not put in its place.
func (s *Store) WriteAnswer(approved bool, by, message string, want *v1alpha1.ApprovalTarget, now time.Time) (*Answer, error) {
	sf, err := ReadStateFile(s.StatePath())
	if err != nil {
		return nil, err
	}
	a := sf.ActiveAction
	if sf.Status != StatusRunning || a == nil || a.Approval == nil {
		return nil, fmt.Errorf("loop %s %w", s.name, ErrNoApprovalWaiting)
	}
	waiting := v1alpha1.ApprovalTarget{RunID: sf.RunID, State: a.State, Iteration: a.Iteration}
	if want != nil && *want != waiting {
		return nil, fmt.Errorf("loop %s %w (%s): it waits in %s", s.name, ErrStaleAnswer, *want, waiting)
	}
	ans := &Answer{Run: sf.RunID, State: a.State, Iteration: a.Iteration, Approved: approved, By: by, Message: message, At: now.UTC().Format(time.RFC3339)}
	data, err := json.Marshal(ans)
	if err != nil {
		return nil, err
	}
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	// Answers are written one at a time, so that two answers at once
	// cannot both find no answer there and both report success.
	unlock, err := s.lockAnswers()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if prev, ok := s.readAnswer(); ok {
		if prev.Run == ans.Run && prev.State == ans.State && prev.Iteration == ans.Iteration {
			verdict := "rejected"
			if prev.Approved {
				verdict = "approved"
			}
			return nil, fmt.Errorf("loop %s: %s %w (%s by %s), not yet read by the run", s.name, waiting, ErrAnswered, verdict, cmp.Or(prev.By, "someone"))
		}
		_ = os.Remove(s.AnswerPath()) // an answer to another approval: never read
	}
	return ans, safefile.WriteFile(s.AnswerPath(), data) // no other writer: the lock is held
}

// lockAnswers holds the run's answer lock (a file beside the answer)
// until the returned func is called.
func (s *Store) lockAnswers() (func(), error) {
	f, err := safefile.OpenFile(s.AnswerPath()+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// readAnswer is the answer file's answer, if there is one to read.
func (s *Store) readAnswer() (Answer, bool) {
	var a Answer
	data, err := safefile.Read(s.AnswerPath(), 64<<10)
	return a, err == nil && json.Unmarshal(data, &a) == nil
}

// AnswerPath is where an answer to the run's approval is written.
func (s *Store) AnswerPath() string { return filepath.Join(s.dir, s.name+".answer.json") }

// fileApprover waits for the answer file of a run: looprun approve or
// reject, from another shell.
type fileApprover struct {
	path  string
	clock Clock
	// poll is how often the file is looked for.
	poll time.Duration
}

// Await implements Approver.
func (f *fileApprover) Await(ctx context.Context, req *executor.ApprovalRequest) (*executor.ApprovalAnswer, error) {
	for {
		if ans := f.read(req); ans != nil {
			return ans, nil
		}
		now := f.clock.Now()
		if !req.Deadline.IsZero() && !now.Before(req.Deadline) {
			return nil, nil
		}
		until := now.Add(f.poll)
		if !req.Deadline.IsZero() && req.Deadline.Before(until) {
			until = req.Deadline
		}
		f.clock.SleepUntil(ctx, until)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// read takes the answer to req from the file, if it is there; an answer to
// another approval is dropped.
func (f *fileApprover) read(req *executor.ApprovalRequest) *executor.ApprovalAnswer {
	// The file is claimed (renamed away) before it is read, so that an
	// answer written meanwhile is never the one removed.
	claimed := fmt.Sprintf("%s.read.%d", f.path, os.Getpid())
	if os.Rename(f.path, claimed) != nil {
		return nil
	}
	data, err := safefile.Read(claimed, 64<<10)
	_ = os.Remove(claimed)
	if err != nil {
		return nil
	}
	var a Answer
	if json.Unmarshal(data, &a) != nil || a.Run != req.RunID || a.State != req.State || a.Iteration != req.Iteration {
		return nil // another approval's, or another run's (a killed run left it)
	}
	return &executor.ApprovalAnswer{Approved: a.Approved, By: a.By, Message: a.Message}
}

// Terminal is the terminal a local run was started from: an approval
// state asks there, while looprun approve from another shell may answer
// first.
type Terminal struct {
	// Lines are what the person types, a line at a time.
	Lines <-chan string
	// Out is where the question goes.
	Out io.Writer
	// User names who answers at this terminal.
	User string
}

// terminalApprover asks at the terminal and waits for the answer file
// alike: whichever answers first.
type terminalApprover struct {
	term *Terminal
	file *fileApprover
}

// Await implements Approver.
func (a *terminalApprover) Await(ctx context.Context, req *executor.ApprovalRequest) (*executor.ApprovalAnswer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		ans *executor.ApprovalAnswer
		err error
	}
	fromFile := make(chan result, 1)
	go func() {
		ans, err := a.file.Await(ctx, req)
		fromFile <- result{ans, err}
	}()
	ask := func() {
		_, _ = fmt.Fprintf(a.term.Out, "\nState %s (iteration %d) asks: %s\nApprove? [y/n] (or looprun approve / reject from another shell): ",
			req.State, req.Iteration, cmp.Or(req.Message, "go on?"))
	}
	// typed ends the wait for the answer file once it has stopped, so
	// that it takes no answer meant for a later approval.
	typed := func(approved bool) (*executor.ApprovalAnswer, error) {
		cancel()
		<-fromFile
		return &executor.ApprovalAnswer{Approved: approved, By: a.term.User, Message: "answered at the terminal"}, nil
	}
	ask()
	for {
		select {
		case r := <-fromFile:
			_, _ = fmt.Fprintln(a.term.Out)
			return r.ans, r.err
		case line, ok := <-a.term.Lines:
			if !ok {
				a.term.Lines = nil // the terminal closed: the file alone answers
				continue
			}
			switch strings.ToLower(strings.TrimSpace(line)) {
			case "y", "yes":
				return typed(true)
			case "n", "no":
				return typed(false)
			}
			ask()
		}
	}
}
