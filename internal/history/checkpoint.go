// Package history keeps a run's past in a form that can be checked and
// moved: checkpoints (full snapshots of a run state, each with a SHA-256
// checksum) and the export document that carries a Loop, its event log and
// its checkpoints between namespaces, clusters and machines.
package history

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// CheckpointVersion is the format of a checkpoint this build writes.
const CheckpointVersion = 1

// ErrMissing says a checkpoint asked for is not there.
var ErrMissing = errors.New("checkpoint missing")

// ErrCorrupt says a checkpoint's bytes changed since it was written.
var ErrCorrupt = errors.New("checkpoint corrupt")

// Checkpoint is a full snapshot of a run state, stored as one JSON line.
// SHA256 is the checksum of Run in compact form.
type Checkpoint struct {
	Version   int             `json:"version"`
	Loop      string          `json:"loop"`
	Iteration int32           `json:"iteration"`
	State     string          `json:"state"`
	Seq       int64           `json:"seq"`
	Time      time.Time       `json:"time"`
	SHA256    string          `json:"sha256"`
	Run       json.RawMessage `json:"run"`
}

// Take snapshots run after a completed state: the run state without the
// action in flight, a pending wait or retry, which belong to the moment.
func Take(loop string, run *v1alpha1.RunState, now time.Time) (*Checkpoint, error) {
	return encode(loop, snapshot(run), now)
}

// snapshot copies run without what belongs to the moment.
func snapshot(run *v1alpha1.RunState) *v1alpha1.RunState {
	snap := run.DeepCopy()
	snap.Action, snap.NextStepAt, snap.Retries, snap.Transient = nil, nil, 0, nil
	return snap
}

func encode(loop string, snap *v1alpha1.RunState, now time.Time) (*Checkpoint, error) {
	raw, err := json.Marshal(snap)
	if err != nil {
		return nil, err
	}
	return &Checkpoint{
		Version: CheckpointVersion, Loop: loop, Iteration: snap.Iteration, State: snap.CurrentState,
		Seq: snap.LastSeq, Time: now.UTC(), SHA256: checksum(raw), Run: raw,
	}, nil
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Ref is the checkpoint's entry in a Loop's status index.
func (c *Checkpoint) Ref(segment int32) v1alpha1.CheckpointRef {
	t := c.Time
	return v1alpha1.CheckpointRef{Iteration: c.Iteration, State: c.State, Seq: c.Seq, Segment: segment, Time: timePtr(t)}
}

// RunState checks the checkpoint and returns the run state it holds.
func (c *Checkpoint) RunState() (*v1alpha1.RunState, error) {
	if c.Version > CheckpointVersion {
		return nil, fmt.Errorf("checkpoint of iteration %d has format %d; this looprun reads up to %d", c.Iteration, c.Version, CheckpointVersion)
	}
	// The checksum is of the compact JSON, so re-indenting (an export
	// does) changes nothing, and any other change shows.
	if got := checksum(c.Run); got != c.SHA256 {
		var compact bytes.Buffer
		if err := json.Compact(&compact, c.Run); err != nil {
			return nil, &CorruptError{Iteration: c.Iteration, Seq: c.Seq, Reason: err.Error()}
		}
		if got = checksum(compact.Bytes()); got != c.SHA256 {
			return nil, &CorruptError{Iteration: c.Iteration, Seq: c.Seq, Reason: fmt.Sprintf("SHA-256 is %s, recorded %s", short(got), short(c.SHA256))}
		}
	}
	run := &v1alpha1.RunState{}
	if err := json.Unmarshal(c.Run, run); err != nil {
		return nil, &CorruptError{Iteration: c.Iteration, Seq: c.Seq, Reason: err.Error()}
	}
	if run.Iteration != c.Iteration || run.CurrentState != c.State {
		return nil, &CorruptError{Iteration: c.Iteration, Seq: c.Seq,
			Reason: fmt.Sprintf("it holds iteration %d in state %q", run.Iteration, run.CurrentState)}
	}
	return run, nil
}

// Verify checks the checkpoint's checksum and contents.
func (c *Checkpoint) Verify() error {
	_, err := c.RunState()
	return err
}

// Line renders the checkpoint as one JSON line.
func (c *Checkpoint) Line() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// CorruptError says which checkpoint failed its check, and how.
type CorruptError struct {
	Iteration int32
	Seq       int64
	Reason    string
}

func (e *CorruptError) Error() string {
	if e.Iteration < 0 {
		return fmt.Sprintf("checkpoint corrupt: %s", e.Reason)
	}
	return fmt.Sprintf("checkpoint of iteration %d is corrupt: %s", e.Iteration, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Parse reads JSONL checkpoints. Lines that are not checkpoints come back
// as bad, counted, so a caller can say the data was damaged.
func Parse(data []byte) (cps []Checkpoint, bad int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c Checkpoint
		if err := json.Unmarshal(line, &c); err != nil || c.Version == 0 {
			bad++
			continue
		}
		cps = append(cps, c)
	}
	if sc.Err() != nil {
		bad++
	}
	return cps, bad
}

// FindIn returns the checkpoint with the sequence number seq from JSONL
// read from r (a local checkpoints file), checked. A checkpoint that is not
// there is ErrMissing, or a *CorruptError when damaged lines could have
// been it. Lines are skipped by the seq in their head as they stream by,
// never held whole; only the line found is decoded.
func FindIn(r io.Reader, seq int64) (*Checkpoint, *v1alpha1.RunState, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	bad := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if len(bytes.TrimSpace(chunk)) > 0 {
			s, ok := headSeq(chunk)
			if ok && s == seq {
				line := append([]byte(nil), chunk...)
				for errors.Is(err, bufio.ErrBufferFull) {
					chunk, err = br.ReadSlice('\n')
					line = append(line, chunk...)
				}
				return decode(line, seq)
			}
			if !ok {
				bad++
			}
		}
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if bad > 0 {
		return nil, nil, &CorruptError{Iteration: -1, Seq: seq, Reason: fmt.Sprintf("%d damaged line(s) where checkpoint %d was expected", bad, seq)}
	}
	return nil, nil, ErrMissing
}

// decode reads and checks the checkpoint line found for seq.
func decode(line []byte, seq int64) (*Checkpoint, *v1alpha1.RunState, error) {
	var c Checkpoint
	if err := json.Unmarshal(line, &c); err != nil {
		return nil, nil, &CorruptError{Iteration: -1, Seq: seq, Reason: err.Error()}
	}
	run, err := c.RunState()
	if err != nil {
		return &c, nil, err
	}
	return &c, run, nil
}

// headSeq reads the "seq" of a checkpoint line from its head.
func headSeq(line []byte) (int64, bool) { return headField(line, "seq") }

// headField reads a number field of a checkpoint line from its head: the
// fields before run are short, and a quote inside a JSON string is
// escaped, so the first `"name":` is the field.
func headField(line []byte, name string) (int64, bool) {
	head := line[:min(len(line), 1024)]
	key := []byte(`"` + name + `":`)
	i := bytes.Index(head, key)
	if i < 0 {
		return 0, false
	}
	rest := head[i+len(key):]
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(rest[:end])), 10, 64)
	return n, err == nil
}

// Head reads the iteration and seq of a checkpoint line without decoding
// it; ok is false for a line that does not look like a checkpoint.
func Head(line []byte) (iteration int32, seq int64, ok bool) {
	it, ok1 := headField(line, "iteration")
	seq, ok2 := headField(line, "seq")
	if !ok1 || !ok2 || it < 0 || it > math.MaxInt32 {
		return 0, 0, false
	}
	return int32(it), seq, true
}

// Decode reads and checks one checkpoint line.
func Decode(line []byte) (*Checkpoint, *v1alpha1.RunState, error) {
	_, seq, _ := Head(line)
	return decode(line, seq)
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	if sum == "" {
		return "(none)"
	}
	return sum
}

func timePtr(t time.Time) *metav1.Time { return ptr.To(metav1.NewTime(t)) }
