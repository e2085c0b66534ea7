// Package agentstream reads what an agent CLI prints in its structured mode
// (claude --verbose --output-format stream-json: one JSON record per line)
// as little-loops reads it: the assistant's text goes on as plain lines, as
// it comes; the session's init record names the model; the result record's
// usage is kept, and its error text goes to stderr. The result record ends
// the turn: what the CLI prints after it is not read. A line that is not a
// JSON object (white space around one is allowed) passes through
// unchanged, so a CLI that prints plain text works as before, its usage
// unknown.
package agentstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxRecord bounds a line held to be decoded; a longer line cannot be a
// record worth reading and passes through as it comes, so memory stays
// bounded whatever the CLI prints.
const MaxRecord = 8 << 20

// Usage is what one or more agent turns used, as the CLI reported it.
type Usage struct {
	InputTokens         int64 `json:"inputTokens,omitempty"`
	OutputTokens        int64 `json:"outputTokens,omitempty"`
	CacheReadTokens     int64 `json:"cacheReadTokens,omitempty"`
	CacheCreationTokens int64 `json:"cacheCreationTokens,omitempty"`
	// Model is the model that answered ("" when the CLI did not say).
	Model string `json:"model,omitempty"`
	// CLICostUSD is the CLI's own figure for the cost (0 when it gave
	// none).
	CLICostUSD float64 `json:"cliCostUSD,omitempty"`
}

// Add sums o into u; the model is the last one known.
// The counts stop at the largest int64 instead of wrapping.
func (u *Usage) Add(o Usage) {
	u.InputTokens = satAdd(u.InputTokens, o.InputTokens)
	u.OutputTokens = satAdd(u.OutputTokens, o.OutputTokens)
	u.CacheReadTokens = satAdd(u.CacheReadTokens, o.CacheReadTokens)
	u.CacheCreationTokens = satAdd(u.CacheCreationTokens, o.CacheCreationTokens)
	u.CLICostUSD += o.CLICostUSD
	if o.Model != "" {
		u.Model = o.Model
	}
}

// The bounds of what one agent action may report: far above what any
// model spends in one step, far below what overflows a sum or a price.
const (
	// MaxTokens bounds each token count of one action's usage.
	MaxTokens = 1 << 40
	// MaxCLICostUSD bounds the CLI's own figure for one action's cost.
	MaxCLICostUSD = 1e6
	// MaxModel bounds the length of the model's name.
	MaxModel = 256
)

// Check says what is wrong with u, if anything: a negative or absurd token
// count, a cost that is negative, not a number or absurd, a model name
// too long to be one. Usage comes from what the agent printed (or the
// code it ran): it is checked before it is priced, and a bad one is an
// error of the step, never a free one.
func (u Usage) Check() error {
	for _, c := range []struct {
		name string
		n    int64
	}{{"input_tokens", u.InputTokens}, {"output_tokens", u.OutputTokens},
		{"cache_read_input_tokens", u.CacheReadTokens}, {"cache_creation_input_tokens", u.CacheCreationTokens}} {
		if c.n < 0 || c.n > MaxTokens {
			return fmt.Errorf("the agent reported %s %d, which no agent spends (0 to %d)", c.name, c.n, int64(MaxTokens))
		}
	}
	if c := u.CLICostUSD; c < 0 || c > MaxCLICostUSD || c != c {
		return fmt.Errorf("the agent reported total_cost_usd %v, which no agent spends (0 to %v)", c, MaxCLICostUSD)
	}
	if len(u.Model) > MaxModel {
		return fmt.Errorf("the agent reported a model name of %d bytes (at most %d)", len(u.Model), MaxModel)
	}
	return nil
}

func satAdd(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// Tokens is every token counted.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheCreationTokens
}

// Decoder is an io.Writer taking the CLI's stdout. It writes the text to
// Text and result errors to Stderr. Safe for one writer; Usage may be read
// from another goroutine.
type Decoder struct {
	Text, Stderr io.Writer
	// Calls says the stream is several agent calls one after another (a
	// learning gate's explore calls, with the gate's own lines between):
	// a result record ends one call, not the stream, and each call's
	// usage is also kept (CallUsages).
	Calls bool
	// CallMark, with Calls, starts the line the command prints before each
	// agent call: the usage of the records after it is that call's
	// (CallSlots).
	CallMark []byte
	// OnEnd, when set, is called once the result record ended the turn
	// (not with Calls), after the record's error went to Stderr. It must
	// not call the Decoder.
	OnEnd func()

	mu      sync.Mutex
	buf     []byte
	passing bool // in a line too long to decode, passing it through
	ended   bool // the result record came: the rest is not read
	seen    bool // a result record came (with Calls, the rest is read)
	model   string
	usage   *Usage
	calls   []Usage
	slots   []*Usage // per call begun by a CallMark line
	// bad is the first record's usage that failed Check.
	bad *Usage
}

// New returns a Decoder writing text to text and result errors to stderr.
func New(text, stderr io.Writer) *Decoder {
	return &Decoder{Text: text, Stderr: stderr}
}

// Write takes more of the stream.
func (d *Decoder) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(p)
	for len(p) > 0 && !d.ended {
		if d.passing {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				_, _ = d.Text.Write(p)
				return n, nil
			}
			_, _ = d.Text.Write(p[:i+1])
			p, d.passing = p[i+1:], false
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(d.buf)+len(p) > MaxRecord {
				_, _ = d.Text.Write(d.buf)
				_, _ = d.Text.Write(p)
				d.buf, d.passing = d.buf[:0], true
				return n, nil
			}
			d.buf = append(d.buf, p...)
			return n, nil
		}
		var line []byte
		if len(d.buf) > 0 {
			d.buf = append(d.buf, p[:i]...)
			line = d.buf
		} else {
			line = p[:i]
		}
		d.line(line)
		d.buf = d.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Flush handles a last line without a newline.
func (d *Decoder) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buf) > 0 && !d.passing && !d.ended {
		d.line(d.buf)
	}
	d.buf, d.passing = nil, false
}

// Usage is the sum of the result records' usage; nil when none had any.
// When a record's usage fails Check, it is that record's, as reported, so
// that the step that reads it fails.
func (d *Decoder) Usage() *Usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bad != nil {
		u := *d.bad
		return &u
	}
	if d.usage == nil {
		return nil
	}
	u := *d.usage
	return &u
}

// ResultSeen reports whether a result record came: the agent's turn
// ended, whether or not it said what it used.
func (d *Decoder) ResultSeen() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen
}

// CallSlots is, for each call begun by a CallMark line, in order, what it
// reported using (nil for a call that reported nothing).
func (d *Decoder) CallSlots() []*Usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Usage, len(d.slots))
	for i, u := range d.slots {
		if u != nil {
			c := *u
			out[i] = &c
		}
	}
	return out
}

// CallUsages is the usage of each call that reported one, in order (a
// Decoder with Calls); nil otherwise.
func (d *Decoder) CallUsages() []Usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// record is the part of a stream-json line that is read.
type record struct {
	Type    string          `json:"type"`
	Subtype string          `json:"subtype"`
	Model   string          `json:"model"`
	Message *message        `json:"message"`
	Usage   json.RawMessage `json:"usage"`
	IsError bool            `json:"is_error"`
	Error   string          `json:"error"`
	Result  json.RawMessage `json:"result"`
	Cost    float64         `json:"total_cost_usd"`
}

type message struct {
	Content []block `json:"content"`
}

type block struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

type usageRecord struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
}

// line handles one complete line (without its newline).
func (d *Decoder) line(raw []byte) {
	// White space around a record is allowed, as a JSON document has it.
	line := bytes.TrimLeft(raw, " \t\r\n")
	var r record
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &r) != nil {
		d.pass(raw)
		return
	}
	switch r.Type {
	case "system":
		if r.Subtype == "init" && r.Model != "" {
			d.model = r.Model
		}
	case "assistant":
		d.assistant(r.Message, raw)
	case "result":
		d.result(&r)
		d.seen = true
		if d.Calls {
			d.model = "" // the next call says its own
		} else {
			d.ended = true
			if d.OnEnd != nil {
				d.OnEnd()
			}
		}
	}
	// Any other record (tool results, user turns, records of no type) is
	// the CLI's own bookkeeping: not output.
}

func (d *Decoder) pass(line []byte) {
	if d.Calls && len(d.CallMark) > 0 && bytes.HasPrefix(line, d.CallMark) {
		d.slots = append(d.slots, nil)
	}
	_, _ = d.Text.Write(line)
	_, _ = d.Text.Write([]byte{'\n'})
}

// assistant writes the text blocks of one assistant message, joined by a
// blank line, line by line.
func (d *Decoder) assistant(m *message, raw []byte) {
	if m == nil {
		return
	}
	var parts []string
	for _, b := range m.Content {
		if b.Type != "text" {
			continue
		}
		if b.Text == nil {
			d.pass(raw) // a text block without text: not a record as expected
			return
		}
		parts = append(parts, *b.Text)
	}
	text := strings.Join(parts, "\n\n")
	if text == "" {
		return
	}
	lines := splitLines(text)
	if len(lines) == 0 {
		lines = []string{""}
	}
	for _, l := range lines {
		_, _ = io.WriteString(d.Text, l+"\n")
	}
}

func (d *Decoder) result(r *record) {
	if len(r.Usage) > 0 && !bytes.Equal(r.Usage, []byte("null")) && !bytes.Equal(r.Usage, []byte("{}")) {
		var u usageRecord
		if json.Unmarshal(r.Usage, &u) == nil {
			if d.usage == nil {
				d.usage = &Usage{}
			}
			one := Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
				CacheCreationTokens: u.CacheCreationTokens, Model: cmpOr(r.Model, d.model), CLICostUSD: r.Cost}
			if err := one.Check(); err != nil && d.bad == nil {
				d.bad = &one // kept as reported: the step's check says what is wrong
			}
			d.usage.Add(one)
			if d.Calls {
				d.calls = append(d.calls, one)
				if n := len(d.slots); n > 0 {
					if d.slots[n-1] == nil {
						d.slots[n-1] = &Usage{}
					}
					d.slots[n-1].Add(one)
				}
			}
		}
	}
	if r.IsError {
		text := r.Error
		if text == "" {
			var s string
			if json.Unmarshal(r.Result, &s) == nil {
				text = s
			}
		}
		if text != "" {
			_, _ = io.WriteString(d.Stderr, "[result] "+text+"\n")
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// splitLines splits as Python's str.splitlines does: at \n, \r, \r\n, \v,
// \f, \x1c, \x1d, \x1e, \x85, \u2028 and \u2029, no empty last line.
func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= 0x80 {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		switch r {
		case '\n', '\v', '\f', '\x1c', '\x1d', '\x1e', 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			start = i + size
		case '\r':
			out = append(out, s[start:i])
			if i+1 < len(s) && s[i+1] == '\n' {
				size = 2
			}
			start = i + size
		}
		i += size
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
