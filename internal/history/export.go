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
	var errs []error
	for i := range run.Checkpoints {
		errs = append(errs, run.Checkpoints[i].Verify())
		if i > 0 && run.Checkpoints[i].Seq < run.Checkpoints[i-1].Seq {
			errs = append(errs, fmt.Errorf("checkpoint %d has seq %d, before the one it follows (%d)", i, run.Checkpoints[i].Seq, run.Checkpoints[i-1].Seq))
		}
	}
	for i, e := range run.Events {
		if e.Seq < 1 || i > 0 && e.Seq <= run.Events[i-1].Seq {
			errs = append(errs, fmt.Errorf("event %d (%s) has seq %d: sequence numbers start at 1 and only go up", i, e.Type, e.Seq))
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return run, nil
}
