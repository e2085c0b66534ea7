package localrun

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Every field of the run state survives the state file, whatever its value:
// the run state is filled by reflection, so a field added to RunState and
// forgotten by the state file fails this test. The exceptions are the
// cluster's own: a local run has no Pod, and its phase is one of the four
// statuses little-loops writes.
func TestStateFileRoundTripsEveryField(t *testing.T) {
	phases := []v1alpha1.Phase{v1alpha1.PhaseRunning, v1alpha1.PhaseCompleted, v1alpha1.PhaseFailed, v1alpha1.PhaseInterrupted}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		run := &v1alpha1.RunState{}
		fill(reflect.ValueOf(run).Elem(), r)
		run.Phase = phases[r.IntN(len(phases))]
		run.Action.Pod, run.Action.PodUID, run.Action.Step = "", "", "" // cluster only
		for k, c := range run.Captured {
			c.EventStream = false // it has no stderr, exit code or duration: see TestEventStreamCapture
			run.Captured[k] = c
		}

		ctx := map[string]any{"target": "v"}
		b, err := json.Marshal(encodeState("demo", "loop.yaml", ctx, run))
		if err != nil {
			t.Fatal(err)
		}
		var sf StateFile
		if err := json.Unmarshal(b, &sf); err != nil {
			t.Fatal(err)
		}
		back, err := sf.RunState()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !equality.Semantic.DeepEqual(run, back) {
			t.Fatalf("seed %d: the state file lost something\nwant %+v\ngot  %+v", seed, run, back)
		}
		if sf.LoopFile != "loop.yaml" || sf.Context["target"] != "v" || sf.LoopName != "demo" {
			t.Fatalf("seed %d: loop file %q, context %v, name %q", seed, sf.LoopFile, sf.Context, sf.LoopName)
		}
	}
}

// fill sets every field reachable from v to a random value that is not the
// zero value: pointers point somewhere, maps and slices hold an entry.
func fill(v reflect.Value, r *rand.Rand) {
	switch v.Type() {
	case reflect.TypeFor[metav1.Time]():
		v.Set(reflect.ValueOf(metav1.NewTime(time.Unix(r.Int64N(1<<32), r.Int64N(1e9)).UTC())))
		return
	case reflect.TypeFor[apiextensionsv1.JSON]():
		v.Set(reflect.ValueOf(apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{"n":%d}`, r.IntN(1000))}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", r.IntN(1e6)))
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1 + r.Int64N(1000))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), r)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), r)
			}
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, r)
		fill(e, r)
		v.SetMapIndex(k, e)
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, r)
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	default:
		panic(fmt.Sprintf("fill: no random %s", v.Type()))
	}
}

// A sub-loop's event stream is written as little-loops writes it (exit_code
// null, no stderr or duration) and read back as one.
func TestEventStreamCapture(t *testing.T) {
	c := v1alpha1.CapturedResult{Output: `{"event":"loop_start"}`, Verdict: "yes", EventStream: true}
	b, err := json.Marshal(capturedFile(c))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"output":"{\"event\":\"loop_start\"}","exit_code":null,"verdict":"yes"}`; string(b) != want {
		t.Fatalf("written %s, want %s", b, want)
	}
	var f CapturedFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if back := f.capturedResult(); !reflect.DeepEqual(back, c) {
		t.Fatalf("read back %+v", back)
	}
}

// A sub-loop state's entry is written as little-loops writes it: how the
// child ended, no output, stderr, exit code or duration of its own; a
// capture with the state's name holds the event stream (or the verdict
// beside the child's captures) with it. Each is read back as it was.
func TestSubLoopEntryCapture(t *testing.T) {
	ended := &v1alpha1.SubLoopResult{TerminatedBy: "error", Error: "boom"}
	for _, c := range []struct {
		captured v1alpha1.CapturedResult
		want     string
	}{
		{v1alpha1.CapturedResult{Loop: ended}, `{"terminated_by":"error","error":"boom"}`},
		{v1alpha1.CapturedResult{Output: `{"event":"loop_start"}`, Verdict: "error", EventStream: true, Loop: ended},
			`{"output":"{\"event\":\"loop_start\"}","exit_code":null,"verdict":"error","terminated_by":"error","error":"boom"}`},
		{v1alpha1.CapturedResult{Verdict: "no", Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", FailureTerminal: true,
			Captured: map[string]v1alpha1.ChildCapture{"said": {Output: "hi"}}}},
			`{"verdict":"no","terminated_by":"terminal","failure_terminal":true,"said":{"output":"hi","stderr":"","exit_code":0,"duration_ms":0}}`},
	} {
		b, err := json.Marshal(capturedFile(c.captured))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("written %s, want %s", b, c.want)
		}
		var f CapturedFile
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if back := f.capturedResult(); !equality.Semantic.DeepEqual(back, c.captured) {
			t.Errorf("read back %+v, want %+v", back, c.captured)
		}
	}
}
