package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The CLI talks to clusters through controller-runtime's client only: the
// controller machinery (manager, builder, webhooks, their metrics) would
// cost every `looprun run` its package initialisation, a few milliseconds
// at each start.
func TestLinksNoControllerMachinery(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{
			"sigs.k8s.io/controller-runtime/pkg/manager",
			"sigs.k8s.io/controller-runtime/pkg/builder",
			"sigs.k8s.io/controller-runtime/pkg/webhook",
			"sigs.k8s.io/controller-runtime/pkg/internal/controller",
		} {
			if dep == heavy {
				t.Errorf("looprun links %s", dep)
			}
		}
	}
}
