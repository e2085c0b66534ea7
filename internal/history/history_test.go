package history

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

func sampleRun() *v1alpha1.RunState {
	t := metav1.NewTime(time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC))
	return &v1alpha1.RunState{
		RunID: "r1", CurrentState: "inc", Iteration: 3, Phase: v1alpha1.PhaseRunning, LastSeq: 15, StartedAt: &t,
		Captured:   map[string]v1alpha1.CapturedResult{"total": {Output: "2 <&>"}},
		Action:     &v1alpha1.ActionStatus{State: "inc", Iteration: 4},
		NextStepAt: &t, Retries: 2,
	}
}

func TestTakeAndVerify(t *testing.T) {
	cp, err := Take("count", sampleRun(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cp.Iteration != 3 || cp.State != "inc" || cp.Seq != 15 || len(cp.SHA256) != 64 {
		t.Fatalf("checkpoint %+v", cp)
	}
	run, err := cp.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if run.Action != nil || run.NextStepAt != nil || run.Retries != 0 {
		t.Errorf("the moment's details were kept: %+v", run)
	}
	if run.Captured["total"].Output != "2 <&>" {
		t.Errorf("captured %+v", run.Captured)
	}
	line, err := cp.Line()
	if err != nil {
		t.Fatal(err)
	}
	found, _, err := FindIn(bytes.NewReader(line), 15)
	if err != nil || found.Iteration != 3 {
		t.Fatalf("Find: %v %+v", err, found)
	}
	if _, _, err := FindIn(bytes.NewReader(line), 16); !errors.Is(err, ErrMissing) {
		t.Errorf("Find of another seq: %v", err)
	}
	altered := bytes.Replace(line, []byte(`"total"`), []byte(`"totaL"`), 1)
	if _, _, err := FindIn(bytes.NewReader(altered), 15); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an altered checkpoint passed: %v", err)
	}
	if _, _, err := FindIn(bytes.NewReader(append([]byte("{not json\n"), line[:len(line)/2]...)), 15); !errors.Is(err, ErrCorrupt) {
		t.Errorf("damaged lines: %v", err)
	}
}

func TestFindIn(t *testing.T) {
	var file bytes.Buffer
	for i := range 3 {
		run := sampleRun()
		run.Iteration, run.LastSeq = int32(i+1), int64(10*(i+1))
		run.Captured["big"] = v1alpha1.CapturedResult{Output: strings.Repeat("y", 200<<10)} // lines past the reader's buffer
		cp, err := Take("count", run, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		line, _ := cp.Line()
		file.Write(line)
	}
	_, run, err := FindIn(bytes.NewReader(file.Bytes()), 20)
	if err != nil || run.Iteration != 2 || len(run.Captured["big"].Output) != 200<<10 {
		t.Fatalf("FindIn: %v", err)
	}
	if _, _, err := FindIn(bytes.NewReader(file.Bytes()), 25); !errors.Is(err, ErrMissing) {
		t.Errorf("missing: %v", err)
	}
	altered := bytes.Replace(file.Bytes(), []byte(`"iteration":2`), []byte(`"iteration":7`), 1)
	if _, _, err := FindIn(bytes.NewReader(altered), 20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("altered: %v", err)
	}
}

func TestHeadAndDecode(t *testing.T) {
	cp, err := Take("count", sampleRun(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	line, err := cp.Line()
	if err != nil {
		t.Fatal(err)
	}
	if it, seq, ok := Head(line); !ok || it != cp.Iteration || seq != cp.Seq {
		t.Errorf("Head = %d, %d, %v; want %d, %d", it, seq, ok, cp.Iteration, cp.Seq)
	}
	if _, _, ok := Head([]byte(`{"garbage":true}`)); ok {
		t.Error("Head read a line that is no checkpoint")
	}
	got, run, err := Decode(line)
	if err != nil || got.Seq != cp.Seq || run.Iteration != sampleRun().Iteration {
		t.Errorf("Decode: %+v %+v %v", got, run, err)
	}
	altered := bytes.Replace(line, []byte(`"run":{`), []byte(`"run":{"passes":9,`), 1)
	if _, _, err := Decode(altered); !errors.Is(err, ErrCorrupt) {
		t.Errorf("altered: %v", err)
	}
}

func TestExportRoundTrip(t *testing.T) {
	cp, err := Take("count", sampleRun(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	run := &Run{Source: "local/.loops/count", Loop: v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "count"}},
		Events:      []executor.Event{{Seq: 1, Type: executor.EventLoopStart, Time: time.Now().UTC(), Data: map[string]any{"loop": "count"}}},
		Checkpoints: []Checkpoint{*cp}}
	var b bytes.Buffer
	if err := WriteExport(&b, run); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExport(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Loop.Name != "count" || len(got.Events) != 1 || len(got.Checkpoints) != 1 {
		t.Errorf("round trip: %+v", got)
	}
	for name, doc := range map[string]string{
		"altered":   strings.Replace(b.String(), `"count"`, `"counT"`, 1),
		"cut short": b.String()[:b.Len()/2],
		"newer":     strings.Replace(b.String(), `"version": 1`, `"version": 2`, 1),
		"foreign":   `{"format": "something", "version": 1}`,
	} {
		if _, err := ReadExport(strings.NewReader(doc)); err == nil {
			t.Errorf("%s export was read", name)
		}
	}
}
