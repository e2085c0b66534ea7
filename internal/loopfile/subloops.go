package loopfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// Templates finds every loop f runs as a sub-loop, however deep, and
// returns each as the LoopTemplate a cluster runs it from: named by
// TemplateName from the state's loop:, its file found by LoadSubLoop,
// its own loop: states naming templates too. A loop: that is a template
// (${...}) cannot be followed; it is reported in skipped, and the loops it
// may name must be uploaded by hand.
func Templates(f *File, opts Options) (templates []*v1alpha1.LoopTemplate, skipped []string, err error) {
	made := map[string]string{} // template name -> the file it is made from
	skipped, err = walkSubLoops(f, opts, func(s subLoop) error {
		name, err := TemplateName(s.ref)
		if err != nil {
			return s.fail(err)
		}
		if from, ok := made[name]; ok {
			if from == s.path {
				return nil
			}
			return s.fail(fmt.Errorf("%q runs %s, but LoopTemplate %s is already %s: a cluster holds one template of a name; rename one of the files", s.ref, s.path, name, from))
		}
		made[name] = s.path
		spec, err := clusterSpec(s.child)
		if err != nil {
			return err
		}
		templates = append(templates, &v1alpha1.LoopTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LoopTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: s.child.Loop.Annotations},
			Spec:       v1alpha1.LoopTemplateSpec{LoopSpec: *spec, Parameters: s.child.Parameters},
		})
		return nil
	})
	return templates, skipped, err
}

// ClusterLoop is f's loop as a cluster runs it: a copy whose every loop:
// (but a template, ${...}) names its LoopTemplate by TemplateName.
func ClusterLoop(f *File) (*v1alpha1.Loop, error) {
	spec, err := clusterSpec(f)
	if err != nil {
		return nil, err
	}
	loop := f.Loop.DeepCopy()
	loop.Spec = *spec
	return loop, nil
}

// clusterSpec is a copy of f's spec whose loop: states name LoopTemplates.
func clusterSpec(f *File) (*v1alpha1.LoopSpec, error) {
	spec := f.Loop.Spec.DeepCopy()
	if f.LittleLoops() {
		seedUsedThresholds(spec)
	}
	for _, sn := range slices.Sorted(maps.Keys(spec.States)) {
		st := spec.States[sn]
		if st.Loop == "" || interpolate.HasReferences(st.Loop) {
			continue
		}
		name, err := TemplateName(st.Loop)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", statePath(f, sn), err)
		}
		st.Loop = name
		spec.States[sn] = st
	}
	return spec, nil
}

// TemplateName is the name of the LoopTemplate a cluster runs the sub-loop
// `loop: ref` from. In a cluster a sub-loop is a LoopTemplate named by its
// name, and an object name has no folders: a little-loops loop in a
// subfolder, oracles/NAME, is the template oracles-NAME. The name is
// lower-cased and each '/' and '_' becomes '-'; a name that even so is not
// a DNS-1123 subdomain (such as one with a space, or ../NAME) is an error.
func TemplateName(ref string) (string, error) {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(ref))
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name, nil
	}
	as := ""
	if name != ref {
		as = fmt.Sprintf(" (as %q)", name)
	}
	return "", fmt.Errorf("%q cannot name a LoopTemplate in a cluster%s: a template's name is lower-case letters, digits, '-' and '.', "+
		"begins and ends with a letter or digit, and has at most 253 characters; rename the loop file", ref, as)
}

// CheckSubLoops checks that every loop f runs as a sub-loop (named without
// a template), however deep, is found and reads, as little-loops checks a
// file before it runs it.
func CheckSubLoops(f *File, opts Options) error {
	_, err := walkSubLoops(f, opts, func(subLoop) error { return nil })
	return err
}

// LoadSubLoop finds and reads the loop a sub-loop state names; run,
// resume, validate, convert and apply all find it so. It is looked up as
// a path, in LoopsDir, then beside the file that names it and beside each
// loop file above that one, up to the file the run started from, then on
// the library path; what it imports is looked up in the same directories.
// So a little-loops install's bundled loops find oracles/NAME beside them,
// an oracle finds its siblings as oracles/NAME too, and both find lib/.
// callers are the loop files running, outermost first, the one naming ref
// last (empty ones are skipped). It returns the file's absolute path too.
func LoadSubLoop(ref string, callers []string, opts Options) (*File, string, error) {
	var beside []string
	for _, c := range slices.Backward(callers) {
		if c == "" {
			continue
		}
		if dir := filepath.Dir(c); !slices.Contains(beside, dir) {
			beside = append(beside, dir)
		}
	}
	opts.LibraryPath = append(beside, opts.LibraryPath...)
	path, err := Resolve(ref, opts)
	if err != nil {
		return nil, "", err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	f, err := Load(path, opts)
	return f, abs, err
}

// subLoop is a sub-loop state, in the file parent, and the loop it runs:
// child, read from path (absolute).
type subLoop struct {
	parent     *File
	state, ref string
	child      *File
	path       string
}

// fail says what is wrong with the state, naming its file.
func (s subLoop) fail(err error) error {
	return fmt.Errorf("%s: %w", statePath(s.parent, s.state), err)
}

// statePath names a state's loop: field, with the file when f has one.
func statePath(f *File, state string) string {
	if f.Path == "" {
		return "states." + state + ".loop"
	}
	return f.Path + ": states." + state + ".loop"
}

// walkSubLoops hands fn each sub-loop state of f and of the loops it runs,
// however deep, each loop file read once; skipped are the loop: names
// that are templates.
func walkSubLoops(f *File, opts Options, fn func(subLoop) error) (skipped []string, err error) {
	walked := map[string]bool{} // by absolute path
	var walk func(f *File, callers []string) error
	walk = func(f *File, callers []string) error {
		callers = append(slices.Clip(callers), f.Path)
		for _, sn := range slices.Sorted(maps.Keys(f.Loop.Spec.States)) {
			s := subLoop{parent: f, state: sn, ref: f.Loop.Spec.States[sn].Loop}
			switch {
			case s.ref == "":
				continue
			case interpolate.HasReferences(s.ref):
				skipped = append(skipped, fmt.Sprintf("%s: %q is a template; upload the loops it names yourself", statePath(f, sn), s.ref))
				continue
			}
			var err error
			if s.child, s.path, err = LoadSubLoop(s.ref, callers, opts); err != nil {
				return s.fail(err)
			}
			if err := fn(s); err != nil {
				return err
			}
			if !walked[s.path] {
				walked[s.path] = true
				if err := walk(s.child, callers); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if abs, err := filepath.Abs(f.Path); err == nil && f.Path != "" {
		walked[abs] = true
	}
	return skipped, walk(f, nil)
}

// TemplateYAML renders a LoopTemplate as a manifest.
func TemplateYAML(t *v1alpha1.LoopTemplate) ([]byte, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(m)
}
