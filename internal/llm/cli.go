package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/pycompat"
)

// maxCLIOutput bounds what the judge's CLI may print.
const maxCLIOutput = 4 << 20

// CLIJudge asks the agent CLI for verdicts in its JSON mode (claude -p
// --output-format json --json-schema SCHEMA), with the user's own login,
// as ll-loop's judge does when there is no API key.
type CLIJudge struct {
	// Program is the CLI (claude).
	Program string
	Model   string
	Timeout time.Duration
}

// CLIForSpec returns a CLIJudge for a loop: the agent command's program,
// the judge's model as the file names it (sonnet when it names none: the
// CLI resolves its own aliases) and timeout.
func CLIForSpec(spec *v1alpha1.LoopSpec) *CLIJudge {
	return &CLIJudge{Program: spec.GetAgentCommand()[0], Model: spec.LLM.GetModelAlias(), Timeout: spec.LLM.GetTimeout()}
}

// Judge asks for a verdict. It never fails: problems are error verdicts.
func (j *CLIJudge) Judge(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
	return verdict(ctx, req, j.Model, j.ask)
}

func (j *CLIJudge) ask(ctx context.Context, model string, req evaluate.JudgeRequest) (map[string]any, *agentstream.Usage, error) {
	schema := req.Schema
	if schema == nil {
		schema = evaluate.DefaultSchema
	}
	prompt := req.Prompt
	if prompt == "" {
		prompt = evaluate.DefaultPrompt
	}
	text := prompt + "\n\n" + cliEvidenceContract + "\n\n<action_output>\n" + req.Output + "\n</action_output>"
	args := []string{"--output-format", "json", "-p", text}
	if model != "" {
		args = append(args, "--model", model)
	}
	args = append(args, "--json-schema", string(schema), "--no-session-persistence")
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = v1alpha1.DefaultLLMTimeoutSeconds * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, j.Program, args...)
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return nil, nil, fmt.Errorf("judge call timed out after %s: %w", timeout, context.DeadlineExceeded)
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("%s CLI not found: install it, or set ANTHROPIC_API_KEY for the judge to use the API", j.Program)
	case err != nil:
		return nil, nil, fmt.Errorf("%s CLI error: %s", j.Program, firstLine(stderr.String(), err.Error()))
	}
	return parseEnvelope(stdout.Bytes(), model)
}

// cliEvidenceContract is evidenceContract for an answer in JSON.
const cliEvidenceContract = "Judge only from the action output below. Quote in evidence the lines your verdict rests on. " +
	"If the output does not show whether the action succeeded, answer cannot_judge."

// parseEnvelope reads the CLI's JSON answer (the last line of JSONL): its
// structured_output, else its result as JSON; and its usage.
func parseEnvelope(out []byte, model string) (map[string]any, *agentstream.Usage, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil, errors.New("the judge's CLI printed nothing")
	}
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 && json.Valid(out[i+1:]) && !json.Valid(out) {
		out = out[i+1:]
	}
	var env struct {
		Subtype          string         `json:"subtype"`
		IsError          bool           `json:"is_error"`
		Result           any            `json:"result"`
		StructuredOutput map[string]any `json:"structured_output"`
		Usage            *struct {
			InputTokens              int64 `json:"input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		} `json:"usage"`
		TotalCostUSD float64 `json:"total_cost_usd"`
		Verdict      any     `json:"verdict"`
	}
	if err := json.Unmarshal(out, &env); err != nil {
		return nil, nil, fmt.Errorf("the judge's CLI answer is not JSON: %w", err)
	}
	var usage *agentstream.Usage
	if u := env.Usage; u != nil {
		usage = &agentstream.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens,
			CacheCreationTokens: u.CacheCreationInputTokens, Model: model, CLICostUSD: env.TotalCostUSD}
	}
	switch {
	case env.Subtype == "error_max_structured_output_retries":
		return nil, usage, errors.New("the judge's CLI could not produce valid structured output after retries")
	case env.IsError:
		return nil, usage, fmt.Errorf("the judge's CLI reported an error: %s", firstLine(fmt.Sprint(env.Result), ""))
	case env.StructuredOutput != nil:
		return env.StructuredOutput, usage, nil
	}
	switch r := env.Result.(type) {
	case map[string]any:
		return r, usage, nil
	case string:
		if r == "" {
			break
		}
		var answer map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(r)), &answer); err == nil {
			return answer, usage, nil
		}
		// A model behind the CLI that ignores --json-schema may give its
		// answer as <StructuredOutput> tags in the result text.
		if answer := taggedAnswer(r); answer != nil {
			return answer, usage, nil
		}
		return nil, usage, errors.New("the judge's CLI answered without a verdict in JSON")
	}
	if env.Verdict != nil {
		var answer map[string]any
		_ = json.Unmarshal(out, &answer)
		return answer, usage, nil
	}
	return nil, usage, errors.New("the judge's CLI answered with an empty result")
}

var (
	fencedRE     = regexp.MustCompile("(?is)```(?:json)?\\s*(.*?)\\s*```")
	tagVerdictRE = regexp.MustCompile(`(?is)<verdict>\s*(.*?)\s*</verdict>`)
	tagFieldRE   = map[string]*regexp.Regexp{
		"confidence": regexp.MustCompile(`(?is)<confidence>\s*(.*?)\s*</confidence>`),
		"reason":     regexp.MustCompile(`(?is)<reason>\s*(.*?)\s*</reason>`),
		"evidence":   regexp.MustCompile(`(?is)<evidence>\s*(.*?)\s*</evidence>`),
	}
)

// taggedAnswer reads an answer given as tags (<verdict>, <confidence>,
// <reason>, <evidence>, usually inside <StructuredOutput>, perhaps in a
// code fence); nil without a <verdict> tag. A tag left out, or a
// confidence that is not a number, is left out of the answer.
func taggedAnswer(text string) map[string]any {
	if m := fencedRE.FindStringSubmatch(text); m != nil {
		text = m[1]
	}
	m := tagVerdictRE.FindStringSubmatch(text)
	if m == nil {
		return nil
	}
	answer := map[string]any{"verdict": strings.ToLower(pycompat.Strip(m[1]))}
	if m := tagFieldRE["confidence"].FindStringSubmatch(text); m != nil {
		if f, ok := pycompat.ParseFloat(m[1]); ok {
			answer["confidence"] = f
		}
	}
	for _, k := range []string{"reason", "evidence"} {
		if m := tagFieldRE[k].FindStringSubmatch(text); m != nil {
			answer[k] = pycompat.Strip(m[1])
		}
	}
	return answer
}

func firstLine(s, otherwise string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return otherwise
	}
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	return line
}

// limitedBuffer keeps the first maxCLIOutput bytes written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxCLIOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
