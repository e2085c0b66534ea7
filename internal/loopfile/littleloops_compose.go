package loopfile

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The keys that compose loops: a sub-loop state's, and the parameters a
// fragment state binds.

func fragmentParamsRead(r *reader, m map[string]any, k, _ string, st *stateRead) {
	params, _ := m[k].(map[string]any)
	st.FragmentParams = make(map[string]apiextensionsv1.JSON, len(params))
	for name, v := range params {
		st.FragmentParams[name] = r.order.toJSON(v)
	}
}

func worktreeKey(r *reader, m map[string]any, k, fp string, st *stateRead) {
	if _, ok := m["loop"]; !ok {
		r.fail("%s: worktree needs loop", fp)
		return
	}
	st.Worktree = r.str(m, k, fp)
}

// with reads a state's with: a sub-loop's parameter bindings. (On a
// fragment state, with binds the fragment's ${param.*}, which looprun does
// not support.)
func (r *reader) with(m map[string]any, k, fp string, st *v1alpha1.State) {
	if _, ok := m["loop"]; !ok {
		r.warn("%s: fragment parameters are not supported by looprun; ignored", fp)
		return
	}
	w, ok := m[k].(map[string]any)
	if !ok {
		r.fail("%s: must be a mapping of parameter names to values", fp)
		return
	}
	st.With = make(map[string]apiextensionsv1.JSON, len(w))
	for name, v := range w {
		st.With[name] = r.order.toJSON(v)
	}
}
