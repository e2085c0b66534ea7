package main

import "slices"

// The groups looprun --help lists its commands in, each saying where the
// command works and what a bare NAME names there (target.go and
// kube.loopTarget read a NAME).
const (
	groupLocal        = "local"
	groupCluster      = "cluster"
	groupLocalFirst   = "local-first"
	groupClusterFirst = "cluster-first"
	groupBoth         = "both"
)

type helpGroup struct{ id, title string }

// helpGroups are the groups in the order --help lists them. As kubectl
// loop, a bare NAME always names a Loop in the cluster, so the commands of
// groupLocalFirst are listed with groupClusterFirst's (helpGroupOf says
// which group a command is in).
func helpGroups(plugin bool) []helpGroup {
	groups := []helpGroup{
		{groupLocal, "Local runs and loop files (no cluster):"},
		{groupCluster, "Loops in a cluster (NAME and loop/NAME are a Loop; kubeconfig and flags as kubectl's):"},
		{groupLocalFirst, "A local run or a Loop (NAME is a local run under --loops-dir; loop/NAME a Loop in the cluster):"},
		{groupClusterFirst, "A Loop or a local run (NAME and loop/NAME are a Loop in the cluster; --local NAME a local run):"},
		{groupBoth, "Local runs and cluster Loops together:"},
	}
	if plugin {
		groups = slices.Delete(groups, 2, 3)
		groups[2].title = "A Loop or a local run (as kubectl loop, NAME and loop/NAME are a Loop in the cluster; --local NAME, where a command has it, a local run):"
	}
	return groups
}

// helpGroupOf is the group a command of group id is listed in.
func helpGroupOf(id string, plugin bool) string {
	if plugin && id == groupLocalFirst {
		return groupClusterFirst
	}
	return id
}

// resumeHelp tells resume's two forms apart: little-loops' resume of a
// local run (ll-loop resume NAME) and the unsuspending of a cluster Loop.
// As kubectl loop, only the second is there.
func resumeHelp(plugin bool) (long, example string) {
	if plugin {
		return "Resume the Loop NAME (or loop/NAME) in the cluster: set spec.suspend to false, the\n" +
				"opposite of suspend. (looprun resume NAME, outside kubectl, continues a local run.)",
			"  kubectl loop resume fix-tests -n ci"
	}
	return "Two commands under one name, told apart by how the loop is named:\n\n" +
			"  resume NAME        continue the local run NAME (under --loops-dir) from where it stopped,\n" +
			"                     as ll-loop resume NAME does; the same flags as run\n" +
			"  resume loop/NAME   resume the Loop NAME in the cluster: set spec.suspend to false\n" +
			"                     (the opposite of suspend); run's flags do not apply",
		`  # continue the local run fix-tests, interrupted or paused on its budget
  looprun resume fix-tests --max-cost 5
  # let the suspended Loop fix-tests in namespace ci go on
  looprun resume loop/fix-tests -n ci`
}
