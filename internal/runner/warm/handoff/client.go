package handoff

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client is the operator's side: it talks to one runner (Addr, host:port)
// with its run's key, and believes only answers signed with it.
type Client struct {
	Addr string
	Key  []byte
	// HTTP is the client to use (nil: Default).
	HTTP *http.Client
}

// Default is the HTTP client of hand-offs: connections kept per runner.
var Default = &http.Client{Transport: &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 2,
	IdleConnTimeout:     90 * time.Second,
}}

// ErrUnreachable says the runner could not be reached (not listening yet,
// gone): the request may be tried again.
var ErrUnreachable = errors.New("the runner cannot be reached")

// AnswerError is an answer of the runner other than success.
type AnswerError struct {
	Code    int
	Message string
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("the runner answered %d: %s", e.Code, e.Message)
}

// Hand hands a step over (once: a step the runner knows is answered, not
// run again).
func (c *Client) Hand(ctx context.Context, id string, s Step) (Status, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return Status{}, err
	}
	var st Status
	return st, c.do(ctx, http.MethodPut, "/v1/steps/"+url.PathEscape(id), body, &st)
}

// Wait reads a step's status, waiting up to wait for it to end.
func (c *Client) Wait(ctx context.Context, id string, wait time.Duration) (Status, error) {
	var st Status
	return st, c.do(ctx, http.MethodGet, "/v1/steps/"+url.PathEscape(id)+"?wait="+wait.String(), nil, &st)
}

// Collected tells the runner the step's result is kept by the operator.
func (c *Client) Collected(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/steps/"+url.PathEscape(id)+"/collected", nil, nil)
}

// Exit ends the runner (its run ended; last names its last step).
func (c *Client) Exit(ctx context.Context, last string) error {
	return c.do(ctx, http.MethodPost, "/v1/steps/"+url.PathEscape(last)+"/exit", nil, nil)
}

// Cancel stops a running step.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/steps/"+url.PathEscape(id), nil, nil)
}

func (c *Client) do(ctx context.Context, method, uri string, body []byte, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+uri, bytes.NewReader(body))
	if err != nil {
		return err
	}
	at := strconv.FormatInt(time.Now().UnixNano(), 10)
	req.Header.Set(headerTime, at)
	req.Header.Set(headerSignature, sign(c.Key, "request", requestFields(method, uri, at), body))
	hc := c.HTTP
	if hc == nil {
		hc = Default
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 2*maxBody))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if !verify(c.Key, resp.Header.Get(headerSignature), "answer", answerFields(method, uri, at, resp.StatusCode), b) {
		// Not the runner this key belongs to (another Pod took its
		// address, or something in between answers).
		return &AnswerError{Code: resp.StatusCode, Message: "the answer is not signed with the run's runner key"}
	}
	if resp.StatusCode/100 != 2 {
		var msg string
		_ = json.Unmarshal(b, &msg)
		return &AnswerError{Code: resp.StatusCode, Message: msg}
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(b, into)
}
