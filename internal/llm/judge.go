// Package llm is the LLM judge: it asks a model, through the Anthropic
// Messages API, for a structured verdict on an action's output.
//
// The answer is forced through a tool whose input schema is the evaluator's
// schema, so the model's reply is always a JSON object. Every failure (no key,
// a timeout, a 500, a reply without the tool call) becomes an error verdict.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// toolName is the tool the model must call with its verdict.
const toolName = "record_verdict"

// evidenceContract tells the model what a verdict must rest on.
const evidenceContract = "Judge only from the action output below. Quote in evidence the lines your verdict rests on. " +
	"If the output does not show whether the action succeeded, answer cannot_judge. " +
	"Answer by calling the " + toolName + " tool."

// Config configures a Judge.
type Config struct {
	// APIKey authenticates; empty leaves the SDK's own lookup (ANTHROPIC_API_KEY).
	APIKey string
	// BaseURL overrides the API endpoint (tests point it at a local server).
	BaseURL string
	// Model, MaxTokens and Timeout default to the spec's defaults.
	Model     string
	MaxTokens int64
	Timeout   time.Duration
	// MaxRetries is how often the SDK retries a failed call. Default 2.
	MaxRetries *int
}

// Judge asks the model for verdicts.
type Judge struct {
	client anthropic.Client
	cfg    Config
}

// New returns a Judge.
func New(cfg Config) *Judge {
	if cfg.Model == "" {
		cfg.Model = v1alpha1.DefaultLLMModel
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = int64(v1alpha1.DefaultLLMMaxTokens)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = v1alpha1.DefaultLLMTimeoutSeconds * time.Second
	}
	opts := []option.RequestOption{}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.MaxRetries != nil {
		opts = append(opts, option.WithMaxRetries(*cfg.MaxRetries))
	}
	return &Judge{client: anthropic.NewClient(opts...), cfg: cfg}
}

// ForSpec returns a Judge configured from a loop's llm settings, with the key
// and base URL given (the spec's baseURL wins over baseURL).
func ForSpec(l *v1alpha1.LLMSpec, apiKey, baseURL string) *Judge {
	cfg := Config{APIKey: apiKey, BaseURL: baseURL, Model: l.GetModel(), MaxTokens: int64(l.GetMaxTokens()), Timeout: l.GetTimeout()}
	if l != nil && l.BaseURL != "" {
		cfg.BaseURL = l.BaseURL
	}
	return New(cfg)
}

// Judge asks for a verdict. It never fails: problems are error verdicts.
func (j *Judge) Judge(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
	if req.Model != "" {
		req.Model = v1alpha1.ResolveModelAlias(req.Model) // the API knows no aliases
	}
	return verdict(ctx, req, j.cfg.Model, j.ask)
}

// verdict asks (the API or the CLI) and reads the answer, timing it; a
// request's own model wins over the judge's.
func verdict(ctx context.Context, req evaluate.JudgeRequest, model string,
	ask func(context.Context, string, evaluate.JudgeRequest) (map[string]any, *agentstream.Usage, error)) evaluate.Result {
	start := time.Now()
	if req.Model != "" {
		model = req.Model
	}
	answer, usage, err := ask(ctx, model, req)
	if err != nil {
		d := map[string]any{"error": err.Error(), "llm_model": model, "llm_latency_ms": time.Since(start).Milliseconds()}
		if errors.Is(err, context.DeadlineExceeded) {
			d["timeout"] = true
		}
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: d, Usage: usage}
	}
	r := evaluate.Interpret(req, answer)
	r.Details["llm_model"] = model
	r.Details["llm_latency_ms"] = time.Since(start).Milliseconds()
	r.Usage = usage
	return r
}

// usageOf is what a call used, as the API reported it (the model it
// answered with, else the one asked).
func usageOf(msg *anthropic.Message, asked string) *agentstream.Usage {
	u := msg.Usage
	model := msg.Model
	if model == "" {
		model = asked
	}
	return &agentstream.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens,
		CacheCreationTokens: u.CacheCreationInputTokens, Model: model}
}

func (j *Judge) ask(ctx context.Context, model string, req evaluate.JudgeRequest) (map[string]any, *agentstream.Usage, error) {
	schema := req.Schema
	if schema == nil {
		schema = evaluate.DefaultSchema
	}
	var input anthropic.ToolInputSchemaParam
	if err := json.Unmarshal(schema, &input); err != nil {
		return nil, nil, fmt.Errorf("answer schema: %w", err)
	}
	prompt := req.Prompt
	if prompt == "" {
		prompt = evaluate.DefaultPrompt
	}
	text := prompt + "\n\n" + evidenceContract + "\n\n<action_output>\n" + req.Output + "\n</action_output>"
	ctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	msg, err := j.client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     model,
		MaxTokens: j.cfg.MaxTokens,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        toolName,
			Description: anthropic.String("Record the verdict on the action's output."),
			InputSchema: input,
		}}},
		ToolChoice: anthropic.ToolChoiceParamOfTool(toolName),
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("judge call timed out after %s: %w", j.cfg.Timeout, context.DeadlineExceeded)
		}
		// What the endpoint answered stays out of the verdict (and so out of
		// the Loop's status): only its status code is reported.
		var apiErr *anthropic.Error
		var urlErr *url.Error
		switch {
		case errors.As(err, &apiErr):
			return nil, nil, fmt.Errorf("judge call failed: the endpoint answered HTTP %d", apiErr.StatusCode)
		case errors.As(err, &urlErr):
			return nil, nil, errors.New("judge call failed: the endpoint could not be reached")
		}
		return nil, nil, errors.New("judge call failed: the endpoint's answer could not be read")
	}
	usage := usageOf(msg, model)
	for _, block := range msg.Content {
		if block.Type != "tool_use" || block.Name != toolName {
			continue
		}
		var answer map[string]any
		if err := json.Unmarshal(block.Input, &answer); err != nil {
			return nil, usage, fmt.Errorf("judge answer is not a JSON object: %w", err)
		}
		return answer, usage, nil
	}
	return nil, usage, fmt.Errorf("judge answered without a verdict (stop reason %q)", msg.StopReason)
}
