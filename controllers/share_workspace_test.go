package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A child that runs as its parent does mounts its parent's workspace claim,
// not one of its own; a claim named outright, or no workspace, is kept.
func TestShareWorkspace(t *testing.T) {
	rs := &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{MountPath: "/w", VolumeClaimTemplate: &corev1.PersistentVolumeClaimSpec{}}}
	shareWorkspace(rs, "parent")
	if w := rs.Workspace; w.VolumeClaimTemplate != nil || w.ClaimName != "parent-workspace" || w.MountPath != "/w" {
		t.Errorf("workspace %+v", w)
	}
	named := &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "shared"}}
	shareWorkspace(named, "parent")
	if named.Workspace.ClaimName != "shared" {
		t.Errorf("a named claim became %q", named.Workspace.ClaimName)
	}
	shareWorkspace(&v1alpha1.RunnerSpec{}, "parent")
	shareWorkspace(nil, "parent")
}
