package loopfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestShebang(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"#!/home/u/.local/share/pipx/venvs/little-loops/bin/python\n", []string{"/home/u/.local/share/pipx/venvs/little-loops/bin/python"}},
		{"#!/usr/bin/env python3\n", []string{"/usr/bin/env", "python3"}},
		{"#! /usr/bin/python3.12 -s\n", []string{"/usr/bin/python3.12", "-s"}},
		{"#!/bin/sh\n", nil},
		{"import sys\n", nil},
		{"", nil},
	} {
		p := filepath.Join(dir, "ll-loop")
		if err := os.WriteFile(p, []byte(tt.line), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := shebang(p); !slices.Equal(got, tt.want) {
			t.Errorf("shebang(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

// The Python of the ll-loop on PATH is asked first: a pipx install of
// little-loops, which python3 cannot import, is found through it.
func TestFindBundledAsksTheInterpreterOfLLLoop(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "venv", "site", "little_loops")
	if err := os.MkdirAll(filepath.Join(pkg, BundledDir), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The venv's "python" answers as python does to the question asked.
	py := filepath.Join(dir, "venv", "python")
	if err := os.WriteFile(py, []byte("#!/bin/sh\necho "+pkg+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ll-loop"), []byte("#!"+py+"\nimport sys\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("HOME", dir)
	if got, want := FindBundled(), filepath.Join(pkg, BundledDir); got != want {
		t.Errorf("FindBundled() = %q, want %q", got, want)
	}
	t.Setenv("PATH", t.TempDir())
	if got := FindBundled(); got != "" {
		t.Errorf("FindBundled() with nothing installed = %q", got)
	}
}
