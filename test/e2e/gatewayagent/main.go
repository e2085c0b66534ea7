// Command gatewayagent stands in for the claude CLI in the end-to-end tests
// of the model gateway. It finds its key as claude does (the apiKeyHelper
// of /etc/claude-code/managed-settings.json), calls $ANTHROPIC_BASE_URL
// once per word of its prompt (the last argument): "json" a call, "sse" a
// streamed call, "hold" a streamed call the fake upstream holds open; and
// "scan" looks for a model key (its known prefix) in its environment, every
// process's, and every file it can read. It prints stream-json as claude
// does, with a false usage (one token) in its result record, as a hostile
// agent would.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// keyPrefix is what a model key starts with, kept reversed so that this
// program's own file does not hold it and the scan finds only real keys.
var keyPrefix = reverse("-tna-ks")

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func main() {
	prompt := ""
	if len(os.Args) > 1 {
		prompt = os.Args[len(os.Args)-1]
	}
	say(map[string]any{"type": "system", "subtype": "init", "model": "claude-sonnet-4-6"})
	failed := ""
	for i, word := range strings.Fields(prompt) {
		var msg string
		var err error
		switch word {
		case "scan":
			msg = scan()
		case "json", "sse", "hold":
			msg, err = call(word)
		default:
			msg = "unknown word " + word
		}
		if err != nil {
			msg = err.Error()
			failed = msg
		}
		text(fmt.Sprintf("%d %s: %s", i+1, word, msg))
		if err != nil {
			break
		}
	}
	result := map[string]any{"type": "result", "total_cost_usd": 0.000001, "is_error": failed != "",
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1}}
	if failed != "" {
		result["result"] = failed
	}
	say(result)
	if failed != "" {
		os.Exit(1)
	}
}

func say(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func text(s string) {
	say(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{map[string]any{"type": "text", "text": s}}}})
}

// key runs claude's apiKeyHelper, as claude does.
func key() (string, error) {
	b, err := os.ReadFile("/etc/claude-code/managed-settings.json")
	if err != nil {
		return "", fmt.Errorf("no managed settings: %w", err)
	}
	var settings struct {
		APIKeyHelper string `json:"apiKeyHelper"`
	}
	if err := json.Unmarshal(b, &settings); err != nil || settings.APIKeyHelper == "" {
		return "", fmt.Errorf("no apiKeyHelper in %s", b)
	}
	out, err := exec.Command("/bin/sh", "-c", settings.APIKeyHelper).Output()
	return strings.TrimSpace(string(out)), err
}

func call(kind string) (string, error) {
	k, err := key()
	if err != nil {
		return "", err
	}
	body := map[string]any{"model": "claude-sonnet-4-6", "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": "hello"}}}
	if kind != "json" {
		body["stream"] = true
	}
	if kind == "hold" {
		body["metadata"] = map[string]any{"user_id": "hold"}
	}
	b, _ := json.Marshal(body)
	//nolint:gosec // a stub agent calls the gateway its Pod is pointed at
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(os.Getenv("ANTHROPIC_BASE_URL"), "/")+"/v1/messages", bytes.NewReader(b))
	req.Header.Set("x-api-key", k)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Do(req) //nolint:gosec // as above
	if err != nil {
		return "", fmt.Errorf("API Error: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		e, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("API Error: %d %s", resp.StatusCode, e)
	}
	if kind == "json" {
		var m struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return "", fmt.Errorf("API Error: %w", err)
		}
		return "ok " + m.ID, nil
	}
	events := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			events++
			if sc.Text() == "event: error" {
				return "", fmt.Errorf("API Error: stream error after %d events", events)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("API Error: stream cut after %d events: %w", events, err)
	}
	return fmt.Sprintf("ok %d events", events), nil
}

// scan looks for a model key wherever this Pod's processes could read one.
func scan() string {
	var found []string
	files, environs := 0, 0
	for _, e := range os.Environ() {
		if strings.Contains(e, keyPrefix) {
			found = append(found, "env "+strings.SplitN(e, "=", 2)[0])
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil {
			environs++
			if bytes.Contains(b, []byte(keyPrefix)) {
				found = append(found, p)
			}
		}
	}
	_ = filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys" || p == "/dev") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 16<<20 {
			return nil
		}
		b, err := os.ReadFile(p) //nolint:gosec // the scan reads what any process of the Pod could
		if err != nil {
			return nil
		}
		files++
		if bytes.Contains(b, []byte(keyPrefix)) {
			found = append(found, p)
		}
		return nil
	})
	return fmt.Sprintf("scanned %d files and %d process environments; key found in %d: %s", files, environs, len(found), strings.Join(found, ", "))
}
