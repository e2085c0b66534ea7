package agentstream

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A stream as claude --verbose --output-format stream-json prints it.
const session = `{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5","tools":["Bash"]}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Looking at the tests."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make test"}}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"All pass.\r\nVERDICT: done"},{"type":"text","text":"Bye"}]}}
{"type":"result","subtype":"success","is_error":false,"result":"Bye","total_cost_usd":0.0123,"usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":300,"cache_creation_input_tokens":40}}
`

func decode(t *testing.T, in string, chunk int) (text, stderr string, u *Usage) {
	t.Helper()
	var out, errs bytes.Buffer
	d := New(&out, &errs)
	for len(in) > 0 {
		n := min(chunk, len(in))
		if _, err := d.Write([]byte(in[:n])); err != nil {
			t.Fatal(err)
		}
		in = in[n:]
	}
	d.Flush()
	return out.String(), errs.String(), d.Usage()
}

func TestDecodeSession(t *testing.T) {
	for _, chunk := range []int{1, 7, 4096} {
		text, stderr, u := decode(t, session, chunk)
		if want := "Looking at the tests.\nAll pass.\nVERDICT: done\n\nBye\n"; text != want {
			t.Errorf("chunk %d: text %q, want %q", chunk, text, want)
		}
		if stderr != "" {
			t.Errorf("stderr %q", stderr)
		}
		want := Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 300, CacheCreationTokens: 40, Model: "claude-sonnet-4-5", CLICostUSD: 0.0123}
		if u == nil || *u != want {
			t.Errorf("chunk %d: usage %+v, want %+v", chunk, u, want)
		}
	}
}

func TestDecodeEdges(t *testing.T) {
	for _, c := range []struct {
		name, in, text, stderr string
		usage                  *Usage
	}{
		{name: "plain text passes through", in: "hello\nworld", text: "hello\nworld\n"},
		{name: "JSON that is not an object passes", in: "[1,2]\n42\n{not json\n", text: "[1,2]\n42\n{not json\n"},
		{name: "records of other types are not output", in: `{"type":"user"}` + "\n" + `{"score": 5}` + "\n" + `{"type":"stream_event"}` + "\n"},
		{name: "an error result goes to stderr", in: `{"type":"result","is_error":true,"result":"rate limited"}` + "\n", stderr: "[result] rate limited\n"},
		{name: "error field first", in: `{"type":"result","is_error":true,"error":"boom","result":"x"}` + "\n", stderr: "[result] boom\n"},
		{name: "empty usage is none", in: `{"type":"result","usage":{}}` + "\n"},
		{name: "model from init", in: `{"type":"system","subtype":"init","model":"a"}` + "\n" + `{"type":"result","usage":{"input_tokens":1}}` + "\n",
			usage: &Usage{InputTokens: 1, Model: "a"}},
		{name: "model from the result", in: `{"type":"system","subtype":"init","model":"a"}` + "\n" + `{"type":"result","model":"b","usage":{"output_tokens":2}}` + "\n",
			usage: &Usage{OutputTokens: 2, Model: "b"}},
		{name: "nothing after the result is read", in: `{"type":"result","usage":{"input_tokens":1}}` + "\n" + "after\n" +
			`{"type":"result","usage":{"input_tokens":5}}` + "\n" + `{"type":"assistant","message":{"content":[{"type":"text","text":"late"}]}}`,
			usage: &Usage{InputTokens: 1}},
		{name: "white space around a record", in: "  \t" + `{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}` + " \r\n", text: "hi\n"},
		{name: "empty assistant text writes nothing", in: `{"type":"assistant","message":{"content":[{"type":"text","text":""}]}}` + "\n"},
		{name: "a text block without text passes raw", in: `{"type":"assistant","message":{"content":[{"type":"text"}]}}` + "\n",
			text: `{"type":"assistant","message":{"content":[{"type":"text"}]}}` + "\n"},
		{name: "Python's line breaks", in: `{"type":"assistant","message":{"content":[{"type":"text","text":"a\u2028b\fc\r"}]}}` + "\n", text: "a\nb\nc\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text, stderr, u := decode(t, c.in, 3)
			if text != c.text || stderr != c.stderr {
				t.Errorf("text %q stderr %q, want %q %q", text, stderr, c.text, c.stderr)
			}
			if (u == nil) != (c.usage == nil) || (u != nil && *u != *c.usage) {
				t.Errorf("usage %+v, want %+v", u, c.usage)
			}
		})
	}
}

// A line longer than MaxRecord passes through as it comes; the decoder
// holds no more than MaxRecord of it.
func TestLongLineBounded(t *testing.T) {
	var n countingWriter
	d := New(&n, io.Discard)
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range 3 * MaxRecord / len(chunk) {
		_, _ = d.Write(chunk)
	}
	_, _ = d.Write([]byte("\n" + `{"type":"assistant","message":{"content":[{"type":"text","text":"after"}]}}` + "\n"))
	d.Flush()
	if want := 3*MaxRecord + 1 + len("after\n"); n.n != want {
		t.Errorf("wrote %d bytes, want %d", n.n, want)
	}
	if cap(d.buf) > MaxRecord+len(chunk) {
		t.Errorf("held %d bytes", cap(d.buf))
	}
}

type countingWriter struct{ n int }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

func TestUsageRowAsLittleLoopsWritesIt(t *testing.T) {
	at := time.Date(2026, 11, 26, 14, 5, 6, 123456789, time.FixedZone("x", 3600))
	row := UsageRow{Iteration: 4, State: "fix é", Prompt: true, Usage: Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheCreationTokens: 4, Model: "m"}, Time: at}
	want := `{"iteration": 4, "state": "fix \u00e9", "action_type": "prompt", "input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_creation_tokens": 4, "model": "m", "timestamp": "2026-11-26T13:05:06.123456+00:00", ` +
		`"gen_ai.usage.input_tokens": 1, "gen_ai.usage.output_tokens": 2, "gen_ai.usage.cache_read.input_tokens": 3, "gen_ai.usage.cache_creation.input_tokens": 4}` + "\n"
	if got := row.Encode(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	row.Prompt, row.Usage.Model, row.Time = false, "", at.Truncate(time.Second)
	if got := row.Encode(); !strings.Contains(got, `"action_type": "shell_or_mcp"`) || !strings.Contains(got, `"model": "unknown"`) || !strings.Contains(got, `"timestamp": "2026-11-26T13:05:06+00:00", "gen_ai.`) {
		t.Errorf("got %s", got)
	}
	dir := t.TempDir()
	for range 2 {
		if err := AppendUsage(filepath.Join(dir, "runs", "r"), row); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs", "r", UsageFile)); err != nil || strings.Count(string(b), "\n") != 2 {
		t.Errorf("%q %v", b, err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, UsageFile)); err != nil {
		t.Fatal(err)
	}
	if err := AppendUsage(dir, row); err == nil {
		t.Error("appended through a symbolic link")
	}
}

// A result record whose usage no agent spends is what Usage returns, as
// reported, so the step that reads it fails its check; usages sum,
// saturating instead of wrapping.
func TestBadUsageRecordIsKept(t *testing.T) {
	var text, errs strings.Builder
	d := New(&text, &errs)
	_, _ = d.Write([]byte(`{"type":"result","usage":{"input_tokens":1000000,"output_tokens":-1000000}}` + "\n"))
	u := d.Usage()
	if u == nil || u.Check() == nil || u.OutputTokens != -1000000 {
		t.Fatalf("usage %+v", u)
	}
	if err := u.Check(); !strings.Contains(err.Error(), "output_tokens -1000000") {
		t.Fatalf("check: %v", err)
	}
	var sum Usage
	for range 4 {
		sum.Add(Usage{InputTokens: math.MaxInt64 / 3})
	}
	if sum.InputTokens != math.MaxInt64 || sum.Check() == nil {
		t.Fatalf("sum %+v", sum)
	}
	if (Usage{InputTokens: MaxTokens, CLICostUSD: 12.5, Model: "claude-x"}).Check() != nil {
		t.Fatal("a large, sane usage was refused")
	}
}

// With Calls, a result record ends one call and not the stream: the text
// of the later calls is decoded, each call's usage is kept with its own
// model, and Usage is their sum.
func TestDecoderCalls(t *testing.T) {
	var text strings.Builder
	d := New(&text, io.Discard)
	d.Calls = true
	in := `{"type":"system","subtype":"init","model":"a"}` + "\n" +
		`{"type":"result","usage":{"input_tokens":1,"output_tokens":2}}` + "\n" +
		"between\n" +
		`{"type":"assistant","message":{"content":[{"type":"text","text":"second"}]}}` + "\n" +
		`{"type":"result","usage":{"input_tokens":3}}` + "\n" +
		`{"type":"result"}` + "\n"
	if _, err := d.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	d.Flush()
	if text.String() != "between\nsecond\n" {
		t.Errorf("text %q", text.String())
	}
	calls := d.CallUsages()
	if len(calls) != 2 || calls[0] != (Usage{InputTokens: 1, OutputTokens: 2, Model: "a"}) || calls[1] != (Usage{InputTokens: 3}) {
		t.Errorf("calls %+v", calls)
	}
	if u := d.Usage(); u == nil || u.InputTokens != 4 || u.OutputTokens != 2 {
		t.Errorf("usage %+v", u)
	}
}

// A result record ends the turn whether or not it reports usage; plain
// text has none.
func TestResultSeen(t *testing.T) {
	for in, want := range map[string]bool{
		`{"type":"result","subtype":"success","is_error":false,"result":"done"}` + "\n": true,
		session:            true,
		"just some text\n": false,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}` + "\n": false,
	} {
		d := New(io.Discard, io.Discard)
		_, _ = d.Write([]byte(in))
		d.Flush()
		if got := d.ResultSeen(); got != want {
			t.Errorf("%q: ResultSeen %v, want %v", in, got, want)
		}
	}
}

// With a CallMark, each call's usage is told apart, a call that reported
// none as nil; what comes before the first mark is no call's.
func TestDecoderCallSlots(t *testing.T) {
	d := New(io.Discard, io.Discard)
	d.Calls, d.CallMark = true, []byte("mark: call ")
	in := `{"type":"result","usage":{"input_tokens":9}}` + "\n" +
		"mark: call 1 a\n" + `{"type":"result","usage":{"input_tokens":1}}` + "\n" +
		"mark: call 2 b\nplain text\n" +
		"mark: call 3 c\n" + `{"type":"result","usage":{"input_tokens":2}}` + "\n" + `{"type":"result","usage":{"output_tokens":3}}` + "\n"
	_, _ = d.Write([]byte(in))
	d.Flush()
	s := d.CallSlots()
	if len(s) != 3 || s[0] == nil || *s[0] != (Usage{InputTokens: 1}) || s[1] != nil || s[2] == nil || *s[2] != (Usage{InputTokens: 2, OutputTokens: 3}) {
		t.Errorf("slots %v", s)
	}
}
