package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/localrun"
)

// One NAME can be a run on this machine (under --loops-dir) and a Loop in
// the cluster. A bare NAME means one of them, per command: history, resume,
// approve and reject read the local run; the cluster commands (describe,
// get, logs, rewind, ...) the Loop. When NAME names nothing where the
// command looked, its error says where that was and, when the other place
// has a NAME, how to name that one.

// clusterGlance bounds the look at the cluster an error makes: a kubeconfig
// that points nowhere must not hold a local command's error back.
const clusterGlance = 3 * time.Second

// localRunExists reports whether loopsDir holds a run NAME.
func localRunExists(loopsDir, name string) bool {
	s, err := localrun.NewStore(loopsDir, name)
	if err != nil {
		return false
	}
	_, err = os.Stat(s.StatePath())
	return err == nil
}

// noLocalRun is the error of a local command (what it wanted, e.g.
// "nothing to resume") for NAME, which has no run in loopsDir.
func (k *kube) noLocalRun(ctx context.Context, what, loopsDir, name string) error {
	msg := fmt.Sprintf("%s: no local run %q in %s", what, name, loopsDir)
	if ns, ok := k.hasLoop(ctx, name); ok {
		msg += fmt.Sprintf("; the cluster has a Loop %s in namespace %s: name it loop/%s", name, ns, name)
	} else {
		msg += fmt.Sprintf(" (a bare NAME is a run on this machine; loop/%s is a Loop in the cluster)", name)
	}
	return &exitError{code: 1, msg: msg}
}

// hasLoop reports whether the cluster, if one answers soon, has a Loop
// NAME in the namespace the commands use.
func (k *kube) hasLoop(ctx context.Context, name string) (ns string, ok bool) {
	if k.connect() != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, clusterGlance)
	defer cancel()
	if err := k.c.Get(ctx, k.key(name), &v1alpha1.Loop{}); err != nil {
		return "", false
	}
	return k.ns, true
}

// notInCluster is the error of a cluster command for a Loop NAME that is
// not in namespace ns; it points at a local run of that name, if any.
func (k *kube) notInCluster(name string) error {
	return &exitError{code: 1, msg: fmt.Sprintf("loop %q not found in namespace %s", name, k.ns) + k.localRunHint(name)}
}

// localRunHint is "; DIR has a local run NAME (...)" when --loops-dir has a
// run NAME, for the error of a cluster command; "" when it has none.
func (k *kube) localRunHint(name string) string {
	if k.loopsDir == "" || !localRunExists(k.loopsDir, name) {
		return ""
	}
	return fmt.Sprintf("; %s has a local run %q (looprun status %s, looprun history %s)", k.loopsDir, name, name, name)
}
