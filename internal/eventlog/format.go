package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/looprun/looprun/internal/executor"
)

// The event log's format, the same in both backends (the local file here,
// ConfigMap segments in internal/eventlog/configmaps): one JSON event per
// line, in little-loops' shape, each with its sequence number, so an append
// repeated after a crash skips what is already there.

// Encode renders the events numbered after after as JSONL: lines, the
// sequence number of the last one and how many there are.
func Encode(events []executor.Event, after int64) (lines string, last int64, n int, err error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, e := range events {
		if e.Seq <= after {
			continue
		}
		if err := enc.Encode(e); err != nil {
			return "", 0, 0, err
		}
		last, n = e.Seq, n+1
	}
	return b.String(), last, n, nil
}

// LastSeq reads the sequence number of the last event in JSONL data; false
// when there is none (or the last line is damaged).
func LastSeq(data string) (int64, bool) {
	data = strings.TrimRight(data, "\n")
	if data == "" {
		return 0, false
	}
	line := data[strings.LastIndexByte(data, '\n')+1:]
	var e executor.Event
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		return 0, false
	}
	return e.Seq, true
}

// Decode reads JSONL data, every line whole.
func Decode(data string) ([]executor.Event, error) {
	var out []executor.Event
	err := scan(strings.NewReader(data), func(e executor.Event, _ int64) bool {
		out = append(out, e)
		return true
	})
	if err == nil && data != "" && !strings.HasSuffix(data, "\n") {
		return out, errors.New("the last line is cut short")
	}
	return out, err
}

// scan calls fn with each complete event and the offset just past its line,
// until fn returns false. A last line without its newline (cut short by a
// crash) is not an event.
func scan(r io.Reader, fn func(executor.Event, int64) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var off int64
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			off += int64(len(line))
			if t := bytes.TrimSpace(line); len(t) > 0 {
				var e executor.Event
				if jerr := json.Unmarshal(t, &e); jerr != nil {
					return fmt.Errorf("event log line ending at byte %d: %w", off, jerr)
				}
				if !fn(e, off) {
					return nil
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Filter keeps the events of the given types (all when none) about the
// given state (all when empty): those that name it, and those that happened
// while the loop was in it (from its state_enter to the next).
func Filter(events []executor.Event, types []string, state string) []executor.Event {
	if len(types) == 0 && state == "" {
		return events
	}
	var out []executor.Event
	in := ""
	for _, e := range events {
		if e.Type == executor.EventStateEnter {
			in = executor.StateEnterOf(e).State
		}
		if len(types) > 0 && !slices.Contains(types, e.Type) {
			continue
		}
		if state != "" && in != state && !slices.Contains(executor.StatesNamed(e), state) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// KeepThrough returns JSONL data without its lines after the one numbered
// seq (seqOf reads a line's number) and without a last line cut short: what
// a log holds beyond the saved state belongs to a step that was not kept.
// removed says whether anything went.
func KeepThrough(data string, seq int64, seqOf func(line []byte) (int64, bool)) (kept string, removed bool) {
	end := 0
	for end < len(data) {
		i := strings.IndexByte(data[end:], '\n')
		if i < 0 {
			break // cut short
		}
		line := data[end : end+i]
		if n, ok := seqOf([]byte(line)); strings.TrimSpace(line) != "" && (!ok || n > seq) {
			break
		}
		end += i + 1
	}
	return data[:end], end < len(data)
}

// EventSeq reads the sequence number of one event line.
func EventSeq(line []byte) (int64, bool) {
	var e struct {
		Seq *int64 `json:"seq"`
	}
	if err := json.Unmarshal(line, &e); err != nil || e.Seq == nil {
		return 0, false
	}
	return *e.Seq, true
}
