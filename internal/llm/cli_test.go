package llm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
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
	for _, want := range []string{"--output-format\njson\n-p\n", "</action_output>\n--model\nclaude-haiku-4-5\n--json-schema\n{", "}\n--no-session-persistence\n", "<action_output>\nok 12 tests\n</action_output>"} {
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

// An answer as <StructuredOutput> tags in the result text (a model behind
// the CLI that ignores --json-schema) is read; a confidence that is not a
// number is left out.
func TestCLIJudgeTaggedAnswer(t *testing.T) {
	program, _ := stubCLI(t, `{"type":"result","result":"`+"```"+`xml\n<StructuredOutput><Verdict> Partial </Verdict><confidence>high</confidence>`+
		`<reason>half done</reason><evidence>3 of 6</evidence></StructuredOutput>\n`+"```"+`"}`)
	r := (&CLIJudge{Program: program}).Judge(context.Background(), evaluate.JudgeRequest{Output: "3 of 6", MinConfidence: 0.5})
	if r.Verdict != "partial" || r.Details["confidence"] != 1.0 || r.Details["reason"] != "half done" || r.Details["evidence"] != "3 of 6" {
		t.Fatalf("%+v", r)
	}
	program, _ = stubCLI(t, `{"type":"result","result":"no tags here"}`)
	if r := (&CLIJudge{Program: program}).Judge(context.Background(), evaluate.JudgeRequest{Output: "x"}); r.Verdict != "error" {
		t.Errorf("no tags: %+v", r)
	}
}

// The CLI is asked for the model as the loop names it (sonnet when it names
// none); a state's own model wins.
func TestCLIForSpecModel(t *testing.T) {
	spec := &v1alpha1.LoopSpec{}
	if got := CLIForSpec(spec).Model; got != "sonnet" {
		t.Errorf("no model: %q", got)
	}
	spec.LLM = &v1alpha1.LLMSpec{Model: "opus"}
	if got := CLIForSpec(spec).Model; got != "opus" {
		t.Errorf("opus: %q", got)
	}
	program, argsFile := stubCLI(t, `{"type":"result","structured_output":{"verdict":"yes","evidence":"x"}}`)
	(&CLIJudge{Program: program, Model: "sonnet"}).Judge(context.Background(), evaluate.JudgeRequest{Output: "x", Model: "haiku"})
	if args, _ := os.ReadFile(argsFile); !strings.Contains(string(args), "--model\nhaiku\n") {
		t.Errorf("the state's model is not asked for:\n%s", args)
	}
}
