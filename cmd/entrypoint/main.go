// Command entrypoint wraps an action inside its Pod. An init container copies
// it into a shared volume (entrypoint --copy-to DIR/entrypoint); the main
// container runs
//
//	entrypoint [--timeout 2m] [--evaluate JSON] -- bash -c ACTION
//
// It streams the action's output to the container log, forwards signals to
// it, writes a JSON result (exit code, duration, output tails, the verdict of
// a deterministic evaluator over the complete stdout) to the termination
// message, never more than 4,096 bytes, and exits with the action's code
// (124 after a timeout, 128+N after signal N).
//
// `entrypoint serve` is a warm runner Pod's server (internal/runner/warm):
// it takes a run's steps from the operator and runs each under the wrapper
// (`entrypoint --result-fd 3 ...`).
//
// `entrypoint git` clones or pushes the Loop's workspace (internal/gitws),
// the operation in $LOOPRUN_GIT: the wrapper runs it as an action.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner/entrypoint"
	"github.com/looprun/looprun/internal/runner/probe"
	"github.com/looprun/looprun/internal/runner/process"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && args[0] == "git":
		// A clone or push of the Loop's workspace, run under the wrapper.
		return gitws.EnvMain(context.Background(), stdout, stderr)
	case len(args) > 0 && args[0] == "serve":
		// A warm runner: the run's steps, handed over by the operator.
		return handoff.ServeMain(args[1:], stdout, stderr)
	}
	return wrap(args, stdout, stderr)
}

// wrap runs one action under the wrapper.
func wrap(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("entrypoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	copyTo := fs.String("copy-to", "", "copy this binary to the given path and exit (the init container's job)")
	termLog := fs.String("termination-log", cmp.Or(os.Getenv("LOOPRUN_TERMINATION_LOG"), "/dev/termination-log"), "where to write the result (default $LOOPRUN_TERMINATION_LOG, else /dev/termination-log)")
	timeout := fs.Duration("timeout", 0, "kill the action's process group after this long and exit 124")
	idle := fs.Duration("idle-timeout", 0, "kill the action's process group when it prints nothing for this long and exit 124")
	evalJSON := fs.String("evaluate", os.Getenv("LOOPRUN_EVALUATE"), "the state's evaluator as JSON, templates expanded (default $LOOPRUN_EVALUATE)")
	resultFD := fs.Int("result-fd", 0, "write the result to this inherited file descriptor instead of the termination log (a warm runner's step)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out, err := resultOut(*resultFD, *termLog)
	if err != nil {
		fmt.Fprintln(stderr, "entrypoint: --result-fd:", err)
		return 2
	}
	defer out.Close()
	if *copyTo != "" {
		if err := copySelf(*copyTo); err != nil {
			fmt.Fprintln(stderr, "entrypoint:", err)
			return 1
		}
		return 0
	}
	var eval *v1alpha1.Evaluate
	if *evalJSON != "" {
		eval = &v1alpha1.Evaluate{}
		if err := json.Unmarshal([]byte(*evalJSON), eval); err != nil {
			fmt.Fprintln(stderr, "entrypoint: --evaluate:", err)
			return 2
		}
	}
	if dir := os.Getenv(entrypoint.RunDirEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(stderr, "entrypoint: run_dir:", err)
		}
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	stream := os.Getenv(entrypoint.AgentStreamEnv)
	ran := process.Run(context.Background(), process.Spec{
		Argv: fs.Args(), Timeout: *timeout, IdleTimeout: *idle, Evaluate: eval, Stdout: stdout, Stderr: stderr, Signals: signals,
		AgentStream: stream != "", AgentCalls: stream == entrypoint.AgentStreamShell,
	})
	res := entrypoint.NewResult(ran)
	if dir := os.Getenv(entrypoint.RunDirEnv); dir != "" && res.Usage != nil {
		// A row for an agent action; for a command that runs the agent (a
		// learning gate), one for each call, each an agent prompt.
		iteration, _ := strconv.ParseInt(os.Getenv("LOOPRUN_ITERATION"), 10, 32)
		usages := []agentstream.Usage{*res.Usage}
		if stream == entrypoint.AgentStreamShell {
			usages = ran.CallUsages
		}
		for _, u := range usages {
			row := agentstream.UsageRow{Iteration: int32(iteration), State: os.Getenv("LOOPRUN_STATE"), Prompt: true, Usage: u, Time: time.Now()}
			if err := agentstream.AppendUsage(dir, row); err != nil {
				fmt.Fprintf(stderr, "entrypoint: %s: %v\n", agentstream.UsageFile, err)
				break
			}
		}
	}
	if cmd := os.Getenv(entrypoint.ProbeEnv); cmd != "" && res.CannotStart == "" {
		res.Probe = entrypoint.NewProbe(probe.Run(context.Background(), "", nil, cmd))
	}
	if err := out.write(res.Encode()); err != nil {
		fmt.Fprintln(stderr, "entrypoint: writing the result:", err)
	}
	if res.ExitCode < 0 {
		return 128 - res.ExitCode
	}
	return res.ExitCode
}

// result is where the result goes: the termination log, or a warm
// runner's result pipe.
type result struct {
	pipe    *os.File
	termLog string
}

// resultOut opens the result's way out: the inherited descriptor fd when
// given, else the termination log.
func resultOut(fd int, termLog string) (*result, error) {
	if fd <= 0 {
		return &result{termLog: termLog}, nil
	}
	f, err := handoff.ResultPipe(fd)
	if err != nil {
		return nil, err
	}
	return &result{pipe: f}, nil
}

func (r *result) write(b []byte) error {
	if r.pipe != nil {
		_, err := r.pipe.Write(b)
		return err
	}
	return os.WriteFile(r.termLog, b, 0o644)
}

func (r *result) Close() {
	if r.pipe != nil {
		_ = r.pipe.Close()
	}
}

// copySelf copies the running binary to dst, executable.
func copySelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
