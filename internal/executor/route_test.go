package executor

import (
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

type evaluateResult = evaluate.Result

func TestRoute(t *testing.T) {
	short := v1alpha1.State{OnSuccess: "ok", OnFailure: "bad", OnError: "err"}
	onlyErr := v1alpha1.State{OnSuccess: "ok", OnError: "err"}
	table := v1alpha1.State{Route: map[string]v1alpha1.StateName{"success": "ok", "partial": "again", "_": "other", "_error": "err"}}
	errOnly := v1alpha1.State{Route: map[string]v1alpha1.StateName{"target": "done", "_error": "err"}}
	mixed := v1alpha1.State{OnSuccess: "ok", Route: map[string]v1alpha1.StateName{"blocked": "help"}}
	yesNo := v1alpha1.State{Route: map[string]v1alpha1.StateName{"yes": "ok", "no": "bad"}}
	tests := []struct {
		name    string
		st      v1alpha1.State
		verdict string
		want    string
		ok      bool
	}{
		{"shorthand success", short, "success", "ok", true},
		{"shorthand yes", short, "yes", "ok", true},
		{"shorthand no", short, "no", "bad", true},
		{"shorthand error", short, "error", "err", true},
		{"failure falls back to onError", onlyErr, "failure", "err", true},
		{"unknown verdict has no route", short, "partial", "", false},
		{"table exact", table, "partial", "again", true},
		{"table yes matches success", table, "yes", "ok", true},
		{"table default before _error", table, "error", "other", true},
		{"_error catches error", errOnly, "error", "err", true},
		{"_error catches failure", errOnly, "failure", "err", true},
		{"_error does not catch others", errOnly, "progress", "", false},
		{"table keys yes/no", yesNo, "success", "ok", true},
		{"table keys yes/no failure", yesNo, "failure", "bad", true},
		{"extra verdict then shorthand", mixed, "blocked", "help", true},
		{"shorthand after table miss", mixed, "success", "ok", true},
		{"empty verdict goes to default", table, "", "other", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Route(&tt.st, tt.verdict)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Route(%q) = %q, %v; want %q, %v", tt.verdict, got, ok, tt.want, tt.ok)
			}
		})
	}
}
