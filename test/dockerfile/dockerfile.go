// Package dockerfile reads the project's Dockerfile without a Docker engine:
// its stages, what each copies where, its user and entrypoint. The image
// test checks the Dockerfile with it, and the end-to-end image writer lays
// its images out from it, so both follow the one file.
package dockerfile

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// Instruction is one Dockerfile instruction, continuation lines joined.
type Instruction struct {
	Cmd  string // upper case: FROM, COPY, RUN, ...
	Args string
}

// Stage is one FROM and what follows it.
type Stage struct {
	Name, Base string
	Body       []Instruction
}

// File is a parsed Dockerfile.
type File struct {
	// Args are the ARGs before the first FROM, with their defaults.
	Args   map[string]string
	Stages []*Stage
}

// Parse reads the Dockerfile at path.
func Parse(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := &File{Args: map[string]string{}}
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		cmd, rest, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := Instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(rest)}
		switch {
		case in.Cmd == "FROM":
			fields := strings.Fields(in.Args)
			s := &Stage{Base: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.Name = fields[2]
			}
			out.Stages = append(out.Stages, s)
		case len(out.Stages) == 0 && in.Cmd == "ARG":
			k, v, _ := strings.Cut(in.Args, "=")
			out.Args[k] = v
		case len(out.Stages) == 0:
			return nil, fmt.Errorf("%s: %s before the first FROM", path, in.Cmd)
		default:
			last := out.Stages[len(out.Stages)-1]
			last.Body = append(last.Body, in)
		}
	}
	return out, sc.Err()
}

// Stage returns the stage of this name, nil if there is none.
func (f *File) Stage(name string) *Stage {
	for _, s := range f.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Copies lists the stage's COPY instructions as source → destination, for
// those from the given stage ("" for the build context).
func (s *Stage) Copies(from string) map[string]string {
	out := map[string]string{}
	for _, in := range s.Body {
		if in.Cmd != "COPY" {
			continue
		}
		f := strings.Fields(in.Args)
		src := ""
		if v, ok := strings.CutPrefix(f[0], "--from="); ok {
			src, f = v, f[1:]
		}
		if src != from {
			continue
		}
		for _, p := range f[:len(f)-1] {
			out[p] = f[len(f)-1]
		}
	}
	return out
}

// Destinations lists where the stage's COPY instructions put things.
func (s *Stage) Destinations() []string {
	var d []string
	for _, in := range s.Body {
		if in.Cmd == "COPY" {
			f := strings.Fields(in.Args)
			d = append(d, f[len(f)-1])
		}
	}
	return d
}

// Last returns the arguments of the stage's last instruction cmd ("" if none).
func (s *Stage) Last(cmd string) string {
	v := ""
	for _, in := range s.Body {
		if in.Cmd == cmd {
			v = in.Args
		}
	}
	return v
}

// Entrypoint returns the stage's exec-form ENTRYPOINT.
func (s *Stage) Entrypoint() ([]string, error) {
	var argv []string
	if err := yaml.Unmarshal([]byte(s.Last("ENTRYPOINT")), &argv); err != nil || len(argv) == 0 {
		return nil, fmt.Errorf("stage %s: ENTRYPOINT %q is not an exec-form list", s.Name, s.Last("ENTRYPOINT"))
	}
	return argv, nil
}
