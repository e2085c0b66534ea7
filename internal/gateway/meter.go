package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/looprun/looprun/internal/gateway/ledger"
)

// wireUsage is the usage object of the Messages API. A count it leaves out
// stays nil; a count that is not a whole int64 fails its decoding.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// apply raises c's counts to those u reports (usage is cumulative in a
// stream; a count never goes down). A count out of range is an error,
// never a free or negative call.
func (u *wireUsage) apply(c *ledger.Call) error {
	if u == nil {
		return nil
	}
	reported := ledger.Call{Model: c.Model}
	for _, f := range []struct {
		v   *int64
		dst *int64
	}{{u.InputTokens, &reported.InputTokens}, {u.OutputTokens, &reported.OutputTokens},
		{u.CacheCreationInputTokens, &reported.CacheCreationTokens}, {u.CacheReadInputTokens, &reported.CacheReadTokens}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	if err := reported.Usage().Check(); err != nil {
		return err
	}
	c.InputTokens = max(c.InputTokens, reported.InputTokens)
	c.OutputTokens = max(c.OutputTokens, reported.OutputTokens)
	c.CacheCreationTokens = max(c.CacheCreationTokens, reported.CacheCreationTokens)
	c.CacheReadTokens = max(c.CacheReadTokens, reported.CacheReadTokens)
	return nil
}

// record writes c for the caller (the operator's own calls are not
// written: it counts them from the answers it gets).
func (g *gw) record(ctx context.Context, caller *Caller, c ledger.Call) error {
	if caller.Operator {
		return nil
	}
	if err := c.Usage().Check(); err != nil {
		return err
	}
	return g.cfg.Ledger.Record(ctx, caller.Step, c)
}

// recordDetached writes c on a fresh context: the call's own context is
// gone (the agent went away) but what it used must still count.
func (g *gw) recordDetached(caller *Caller, c ledger.Call) error {
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	return g.record(ctx, caller, c)
}

func (g *gw) counted(c ledger.Call) {
	g.m.counted(c.InputTokens, c.OutputTokens, c.CacheReadTokens, c.CacheCreationTokens)
}

// whole meters a non-streaming answer: read whole (bounded), its usage
// recorded as final before a byte of it reaches the agent.
func (g *gw) whole(w http.ResponseWriter, resp *http.Response, caller *Caller) string {
	body, err := io.ReadAll(io.LimitReader(resp.Body, g.cfg.MaxResponseBytes+1))
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return outcomeCutOff
		}
		return g.fail(w, caller, "reading the upstream's answer", err)
	}
	if int64(len(body)) > g.cfg.MaxResponseBytes {
		return g.fail(w, caller, "reading the upstream's answer",
			fmt.Errorf("larger than %d bytes", g.cfg.MaxResponseBytes))
	}
	var msg struct {
		ID    string     `json:"id"`
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		return g.fail(w, caller, "reading the upstream's usage", err)
	}
	if msg.Usage == nil {
		return g.fail(w, caller, "reading the upstream's usage", errors.New("the answer has no usage"))
	}
	c := ledger.Call{ID: msg.ID, Model: msg.Model, Final: true}
	if c.ID == "" {
		c.ID = newCallID()
	}
	if err := msg.Usage.apply(&c); err != nil {
		return g.fail(w, caller, "reading the upstream's usage", err)
	}
	// The answer exists, and the upstream counts it whether or not the
	// agent is still there to read it: the write does not end with the
	// agent's request.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(resp.Request.Context()), recordTimeout)
	err = g.record(rctx, caller, c)
	cancel()
	if err != nil {
		return g.fail(w, caller, "recording the call's usage", err)
	}
	g.counted(c)
	copyResponseHeaders(w.Header(), resp.Header)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return outcomeOK
}

// streamMeter follows one streaming answer. The stream's goroutine
// meters each event under mu; a timer writes the checkpoints, so that
// output that came before the upstream went quiet is recorded too.
type streamMeter struct {
	mu   sync.Mutex
	call ledger.Call
	// started: message_start was seen (the call has an id and its input).
	started bool
	// final: the upstream's last word on usage was recorded.
	final bool
	// deltaBytes are the bytes of content the deltas carried.
	deltaBytes int64
	// recorded is the last call written; timer the next checkpoint's.
	recorded ledger.Call
	timer    *time.Timer
	// failed is a checkpoint's write error: the stream is stopped.
	failed error
}

// checkpoint is the call as seen so far: output at least one token per 4
// bytes of content forwarded, when the upstream's own count lags.
func (s *streamMeter) checkpoint() ledger.Call {
	c := s.call
	c.OutputTokens = max(c.OutputTokens, s.deltaBytes/4)
	c.Final = false
	return c
}

type streamEvent struct {
	Type    string          `json:"type"`
	Message *streamMessage  `json:"message"`
	Usage   *wireUsage      `json:"usage"`
	Delta   json.RawMessage `json:"delta"`
}

type streamMessage struct {
	ID    string     `json:"id"`
	Model string     `json:"model"`
	Usage *wireUsage `json:"usage"`
}

type contentDelta struct {
	Delta struct {
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
	} `json:"delta"`
}

// errStreamAbort ends a stream with an error event.
type errStreamAbort struct {
	doing string
	err   error
}

func (e *errStreamAbort) Error() string { return e.doing + ": " + e.err.Error() }

// stream meters a streaming answer event by event, forwarding each as it
// comes. The call is recorded at message_start (its input) before that
// event is forwarded, every CheckpointEvery while it streams, and as final
// at message_delta (the upstream's cumulative usage) before that event —
// and so the end of the answer — reaches the agent. A stream cut off is
// recorded as it was last seen.
func (g *gw) stream(w http.ResponseWriter, r *http.Request, resp *http.Response, caller *Caller, stopUpstream func()) string {
	ctx := r.Context()
	copyResponseHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	s := &streamMeter{}
	defer s.stopTimer()
	rd := &sseReader{br: bufio.NewReaderSize(resp.Body, 8<<10), limit: g.cfg.MaxEventBytes}
	for {
		err := rd.next()
		if errors.Is(err, errEventTooLarge) {
			return g.abort(w, rc, caller, s, &errStreamAbort{"reading the upstream's stream", err})
		}
		if err != nil {
			if f := s.checkpointFailed(); f != nil {
				return g.abort(w, rc, caller, s, f)
			}
			// EOF, a broken upstream, or the agent gone (the context).
			if !s.isFinal() {
				return g.finish(caller, s, outcomeCutOff)
			}
			if len(rd.ev) > 0 { // a last event without its blank line
				_, _ = w.Write(rd.ev)
				_ = rc.Flush()
			}
			return g.finish(caller, s, outcomeOK)
		}
		s.mu.Lock()
		err = g.meterEvent(ctx, caller, s, rd.kind(), rd.data)
		s.mu.Unlock()
		if err != nil {
			return g.abort(w, rc, caller, s, err)
		}
		if _, err := w.Write(rd.ev); err != nil {
			return g.finish(caller, s, outcomeCutOff)
		}
		if err := rc.Flush(); err != nil {
			return g.finish(caller, s, outcomeCutOff)
		}
		g.armCheckpoint(ctx, caller, s, stopUpstream)
	}
}

// armCheckpoint sets the timer of the next checkpoint, if the call has
// changed since it was last written and none is set.
func (g *gw) armCheckpoint(ctx context.Context, caller *Caller, s *streamMeter, stopUpstream func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.final || s.timer != nil || s.failed != nil || s.checkpoint() == s.recorded {
		return
	}
	s.timer = time.AfterFunc(g.cfg.CheckpointEvery, func() {
		s.mu.Lock()
		if s.final || s.timer == nil {
			s.mu.Unlock()
			return
		}
		c := s.checkpoint()
		s.mu.Unlock()
		err := g.record(ctx, caller, c)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.timer = nil
		switch {
		case err != nil && ctx.Err() == nil:
			// The call may not go on uncounted: stop it; the stream's
			// goroutine ends it with an error event.
			s.failed = &errStreamAbort{"recording the call's usage", err}
			stopUpstream()
		case err == nil:
			s.recorded = c
		}
	})
}

func (s *streamMeter) stopTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

func (s *streamMeter) checkpointFailed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *streamMeter) isFinal() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

// finish ends a stream: a call cut off before its final record is
// recorded as last seen, on a fresh context.
func (g *gw) finish(caller *Caller, s *streamMeter, outcome string) string {
	s.stopTimer()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.final:
		g.counted(s.call)
	case s.started:
		c := s.checkpoint()
		if err := g.recordDetached(caller, c); err != nil {
			g.log.Error(err, "recording a cut-off call", "id", c.ID, "loop", caller.Namespace+"/"+caller.Loop, "pod", caller.Pod)
		}
		g.counted(c)
	}
	return outcome
}

// abort ends a stream the gateway cannot go on with: an error event, as
// the Messages API ends a stream that fails.
func (g *gw) abort(w http.ResponseWriter, rc *http.ResponseController, caller *Caller, s *streamMeter, err error) string {
	doing := "streaming"
	var a *errStreamAbort
	if errors.As(err, &a) {
		doing = a.doing
	}
	s.mu.Lock()
	id := s.call.ID
	s.mu.Unlock()
	g.log.Error(err, "stream failed", "loop", caller.Namespace+"/"+caller.Loop, "pod", caller.Pod, "id", id)
	_, _ = w.Write(sseError("api_error", doing+" failed"))
	_ = rc.Flush()
	return g.finish(caller, s, outcomeFailed)
}

// sseReader reads a stream's events one at a time: ev holds the event's
// raw bytes (forwarded as they are), name and data its fields.
type sseReader struct {
	br             *bufio.Reader
	limit          int
	ev, name, data []byte
}

// next reads the next whole event (up to its blank line).
func (rd *sseReader) next() error {
	if cap(rd.ev) > 64<<10 {
		rd.ev = nil // keep no large buffer for the rest of a long stream
	}
	rd.ev, rd.name, rd.data = rd.ev[:0], rd.name[:0], rd.data[:0]
	for {
		line, err := readLine(rd.br, &rd.ev, rd.limit)
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			return nil
		case bytes.HasPrefix(line, []byte("data:")):
			if len(rd.data) > 0 {
				rd.data = append(rd.data, '\n')
			}
			rd.data = append(rd.data, trimSpace1(line[5:])...)
		case bytes.HasPrefix(line, []byte("event:")):
			rd.name = append(rd.name[:0], trimSpace1(line[6:])...)
		}
	}
}

// kind is the event's type: its name, else its data's "type".
func (rd *sseReader) kind() string {
	if len(rd.name) > 0 {
		return string(rd.name)
	}
	var t struct {
		Type string `json:"type"`
	}
	if len(rd.data) == 0 || json.Unmarshal(rd.data, &t) != nil {
		return ""
	}
	return t.Type
}

// meterEvent counts one event before it is forwarded.
func (g *gw) meterEvent(ctx context.Context, caller *Caller, s *streamMeter, kind string, data []byte) error {
	switch kind {
	case "content_block_delta":
		var d contentDelta
		if json.Unmarshal(data, &d) == nil {
			s.deltaBytes += int64(len(d.Delta.Text) + len(d.Delta.PartialJSON) + len(d.Delta.Thinking) + len(d.Delta.Signature))
		} else {
			s.deltaBytes += int64(len(data))
		}
		return nil
	case "message_start":
		return g.onStart(ctx, caller, s, data)
	case "message_delta":
		return g.onDelta(ctx, caller, s, data)
	case "message_stop":
		if !s.started || s.final {
			return nil
		}
		// The upstream ended without a message_delta's usage: what was
		// seen is its last word.
		c := s.checkpoint()
		c.Final = true
		if err := g.record(ctx, caller, c); err != nil {
			return &errStreamAbort{"recording the call's usage", err}
		}
		s.call, s.final = c, true
	}
	return nil
}

// onStart records the call's start (its input) before message_start is
// forwarded.
func (g *gw) onStart(ctx context.Context, caller *Caller, s *streamMeter, data []byte) error {
	if s.started {
		return nil
	}
	var e streamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return &errStreamAbort{"reading the upstream's usage", fmt.Errorf("message_start: %w", err)}
	}
	if e.Message == nil {
		return &errStreamAbort{"reading the upstream's usage", errors.New("message_start without a message")}
	}
	s.call.ID, s.call.Model = e.Message.ID, e.Message.Model
	if s.call.ID == "" {
		s.call.ID = newCallID()
	}
	if err := e.Message.Usage.apply(&s.call); err != nil {
		return &errStreamAbort{"reading the upstream's usage", err}
	}
	s.started = true
	c := s.checkpoint()
	if err := g.record(ctx, caller, c); err != nil {
		return &errStreamAbort{"recording the call's usage", err}
	}
	s.recorded = c
	return nil
}

// onDelta records the call as final, with the upstream's cumulative
// usage, before message_delta (and so the answer's end) is forwarded.
func (g *gw) onDelta(ctx context.Context, caller *Caller, s *streamMeter, data []byte) error {
	var e streamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return &errStreamAbort{"reading the upstream's usage", fmt.Errorf("message_delta: %w", err)}
	}
	if !s.started {
		return &errStreamAbort{"reading the upstream's usage", errors.New("message_delta before message_start")}
	}
	if err := e.Usage.apply(&s.call); err != nil {
		return &errStreamAbort{"reading the upstream's usage", err}
	}
	c := s.call
	if e.Usage == nil || e.Usage.OutputTokens == nil {
		// No count of the output: the content seen stands for it.
		c.OutputTokens = max(c.OutputTokens, s.deltaBytes/4)
	}
	c.Final = true
	if err := g.record(ctx, caller, c); err != nil {
		return &errStreamAbort{"recording the call's usage", err}
	}
	s.call, s.final = c, true
	return nil
}

var errEventTooLarge = errors.New("an event of the stream is too large")

// readLine reads one line (with its newline) and appends it to ev, the
// event's raw bytes, which stay under limit. The line returned aliases ev.
func readLine(br *bufio.Reader, ev *[]byte, limit int) ([]byte, error) {
	start := len(*ev)
	for {
		frag, err := br.ReadSlice('\n')
		if len(*ev)+len(frag) > limit {
			return nil, errEventTooLarge
		}
		*ev = append(*ev, frag...)
		switch {
		case err == nil:
			return (*ev)[start:], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			if err == io.EOF && len(*ev) > start {
				// A last line without its newline.
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// trimSpace1 drops the one space after a field's colon.
func trimSpace1(b []byte) []byte {
	if len(b) > 0 && b[0] == ' ' {
		return b[1:]
	}
	return b
}
