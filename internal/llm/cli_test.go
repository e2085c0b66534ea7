package llm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looprun/looprun/internal/executor/evaluate"
)

// stubCLI writes a claude that records its arguments and prints body.
func stubCLI(t *testing.T, body string) (program, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	program = filepath.Join(dir, "claude")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\ncat <<'EOF'\n" + body + "\nEOF\n"
	if err := os.WriteFile(program, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return program, argsFile
}

// The judge through the CLI's JSON mode: the structured output is the
// answer, interpreted as the API's is; the usage is kept.
func TestCLIJudge(t *testing.T) {
	program, argsFile := stubCLI(t, `{"type":"result","subtype":"success","is_error":false,"result":"",`+
		`"structured_output":{"verdict":"yes","confidence":0.9,"reason":"tests pass","evidence":"ok 12 tests"},`+
		`"usage":{"input_tokens":120,"output_tokens":30,"cache_read_input_tokens":5,"cache_creation_input_tokens":0},"total_cost_usd":0.001}`)
	j := &CLIJudge{Program: program, Model: "claude-haiku-4-5"}
	r := j.Judge(context.Background(), evaluate.JudgeRequest{Output: "ok 12 tests", MinConfidence: 0.5})
	if r.Verdict != "success" || r.Details["reason"] != "tests pass" || r.Usage == nil || r.Usage.InputTokens != 120 || r.Usage.Model != "claude-haiku-4-5" {
		t.Fatalf("result %+v usage %+v", r, r.Usage)
	}
	args, _ := os.ReadFile(argsFile)
	for _, want := range []string{"-p\n--output-format\njson\n--json-schema\n{", "--no-session-persistence\n--model\nclaude-haiku-4-5\n", "<action_output>\nok 12 tests\n</action_output>"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	// The answer as a JSON string in result (a CLI without --json-schema).
	program, _ = stubCLI(t, `{"type":"result","result":"{\"verdict\":\"no\",\"confidence\":1,\"reason\":\"failed\",\"evidence\":\"FAIL\"}"}`)
	if r := (&CLIJudge{Program: program}).Judge(context.Background(), evaluate.JudgeRequest{Output: "FAIL"}); r.Verdict != "failure" {
		t.Errorf("result string: %+v", r)
	}
	for body, want := range map[string]string{
		`{"type":"result","subtype":"error_max_structured_output_retries"}`: "could not produce valid structured output",
		`{"type":"result","is_error":true,"result":"rate limited"}`:         "reported an error: rate limited",
		`not json`: "not JSON",
	} {
		program, _ := stubCLI(t, body)
		r := (&CLIJudge{Program: program}).Judge(context.Background(), evaluate.JudgeRequest{Output: "x"})
		if r.Verdict != "error" || !strings.Contains(r.Details["error"].(string), want) {
			t.Errorf("%s: %+v", body, r)
		}
	}
	r = (&CLIJudge{Program: filepath.Join(t.TempDir(), "claude")}).Judge(context.Background(), evaluate.JudgeRequest{Output: "x"})
	if r.Verdict != "error" || !strings.Contains(r.Details["error"].(string), "set ANTHROPIC_API_KEY") {
		t.Errorf("no CLI: %+v", r)
	}
}
