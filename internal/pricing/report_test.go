package pricing

import (
	"os"
	"path/filepath"
	"testing"
)

// The report of testdata/usage.jsonl (a priced model, an unknown one, a
// line that is not JSON) as ll-loop prints and writes it (cost-report.txt
// and cost-report.json were written by little-loops' CostReport).
func TestReportAsLittleLoopsWritesIt(t *testing.T) {
	rep, err := ReadReport(filepath.Join("testdata", "usage.jsonl"), Default())
	if err != nil {
		t.Fatal(err)
	}
	for file, got := range map[string]string{"cost-report.txt": rep.Table(), "cost-report.json": rep.JSON()} {
		want, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s:\ngot:\n%s\nwant:\n%s", file, got, want)
		}
	}
}

func TestReportOfNoFileIsEmpty(t *testing.T) {
	rep, err := ReadReport(filepath.Join(t.TempDir(), "usage.jsonl"), Default())
	if err != nil || len(rep.States) != 0 {
		t.Fatalf("got %+v, %v; want an empty report", rep, err)
	}
}
