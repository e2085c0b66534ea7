package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/safefile"
)

// The export document: {"format": ExportFormat, "version": ExportVersion,
// "sha256": <checksum of run as written>, "run": <Run>}.
const (
	ExportFormat  = "looprun.io/run-export"
	ExportVersion = 1
)

// Run is everything an export carries: the Loop (spec, and the run state
// in its status), its event log and its checkpoints.
type Run struct {
	// ExportedAt is when the export was made.
	ExportedAt time.Time `json:"exportedAt"`
	// Source says where the run came from: cluster/NAMESPACE/NAME or
	// local/LOOPS-DIR/NAME.
	Source string `json:"source"`
	// Loop is the Loop; cluster bookkeeping (uid, resourceVersion, the event
	// log's location) is left out.
	Loop v1alpha1.Loop `json:"loop"`
	// Events is the event log, oldest first.
	Events []executor.Event `json:"events"`
	// Checkpoints are the kept checkpoints, oldest first.
	Checkpoints []Checkpoint `json:"checkpoints"`
	// Children are the runs of its sub-loops' children (child Loops, or a
	// local run's child runs), each with its own children.
	Children []Run `json:"children,omitempty"`
	// Templates are the LoopTemplates its sub-loop states name, as a
	// cluster export finds them, for an import into another namespace.
	Templates []v1alpha1.LoopTemplate `json:"templates,omitempty"`
}

// maxChildDepth bounds how deep an export's children may nest.
const maxChildDepth = 8

// check verifies the run's checkpoints and event order, and its children's.
func (r *Run) check(depth int) error {
	if depth > maxChildDepth {
		return fmt.Errorf("children nest deeper than %d", maxChildDepth)
	}
	var errs []error
	for i := range r.Checkpoints {
		errs = append(errs, r.Checkpoints[i].Verify())
		if i > 0 && r.Checkpoints[i].Seq < r.Checkpoints[i-1].Seq {
			errs = append(errs, fmt.Errorf("checkpoint %d has seq %d, before the one it follows (%d)", i, r.Checkpoints[i].Seq, r.Checkpoints[i-1].Seq))
		}
	}
	for i, e := range r.Events {
		if e.Seq < 1 || i > 0 && e.Seq <= r.Events[i-1].Seq {
			errs = append(errs, fmt.Errorf("event %d (%s) has seq %d: sequence numbers start at 1 and only go up", i, e.Type, e.Seq))
			break
		}
	}
	for i := range r.Children {
		if err := r.Children[i].check(depth + 1); err != nil {
			errs = append(errs, fmt.Errorf("child %s: %w", r.Children[i].Loop.Name, err))
		}
	}
	return errors.Join(errs...)
}

type document struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Run     json.RawMessage `json:"run"`
}

// WriteExport writes run as an export document.
func WriteExport(w io.Writer, run *Run) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(run); err != nil {
		return err
	}
	raw := bytes.TrimRight(body.Bytes(), "\n")
	_, err := fmt.Fprintf(w, "{\n  \"format\": %q,\n  \"version\": %d,\n  \"sha256\": %q,\n  \"run\": %s\n}\n",
		ExportFormat, ExportVersion, checksum(raw), raw)
	return err
}

// ReadExport reads an export document and checks it: its format and
// version, its checksum, and every checkpoint's.
func ReadExport(r io.Reader) (*Run, error) { return ReadExportWithin(r, safefile.MaxExport) }

// ReadExportWithin is ReadExport for a document of at most max bytes.
func ReadExportWithin(r io.Reader, max int64) (*Run, error) {
	data, err := safefile.ReadAll(r, "the export", max)
	if err != nil {
		return nil, err
	}
	var doc document
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a looprun export: %w", err)
	}
	switch {
	case doc.Format != ExportFormat:
		return nil, fmt.Errorf("not a looprun export: format is %q, want %q", doc.Format, ExportFormat)
	case doc.Version > ExportVersion:
		return nil, fmt.Errorf("export format version %d is newer than this looprun reads (%d)", doc.Version, ExportVersion)
	case doc.Version < 1:
		return nil, fmt.Errorf("export has no format version")
	case checksum(doc.Run) != doc.SHA256:
		return nil, fmt.Errorf("%w: the export's SHA-256 is %s, recorded %s: the file was changed or cut short", ErrCorrupt, short(checksum(doc.Run)), short(doc.SHA256))
	}
	run := &Run{}
	if err := json.Unmarshal(doc.Run, run); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if err := run.check(0); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return run, nil
}
