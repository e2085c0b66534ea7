package loopfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// Templates finds every loop f runs as a sub-loop, however deep, and
// returns each as the LoopTemplate a cluster runs it from: named as the
// state's loop: names it, its file found as `looprun run NAME` finds it
// (the loops directory, then the library path). A loop: that is a template
// (${...}) cannot be followed; it is reported in skipped, and the loops it
// may name must be uploaded by hand.
func Templates(f *File, opts Options) (templates []*v1alpha1.LoopTemplate, skipped []string, err error) {
	skipped, err = walkSubLoops(f, opts, func(state, ref string, child *File) error {
		if errs := validation.IsDNS1123Subdomain(ref); len(errs) > 0 {
			return fmt.Errorf("states.%s.loop: %q cannot name a LoopTemplate: %s", state, ref, errs[0])
		}
		templates = append(templates, &v1alpha1.LoopTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "LoopTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: ref, Annotations: child.Loop.Annotations},
			Spec:       v1alpha1.LoopTemplateSpec{LoopSpec: child.Loop.Spec, Parameters: child.Parameters},
		})
		return nil
	})
	return templates, skipped, err
}

// CheckSubLoops checks that every loop f runs as a sub-loop (named without
// a template), however deep, is found and reads, as little-loops checks a
// file before it runs it.
func CheckSubLoops(f *File, opts Options) error {
	_, err := walkSubLoops(f, opts, func(string, string, *File) error { return nil })
	return err
}

// ValidateSubLoops is CheckSubLoops for looprun validate: as ll-loop
// validate, it also finds a sub-loop beside the file that names it (a
// little-loops install's loops name their siblings so: oracles/NAME).
func ValidateSubLoops(f *File, opts Options) error {
	opts.beside = true
	return CheckSubLoops(f, opts)
}

// walkSubLoops reads each loop f runs as a sub-loop, once, however deep,
// and hands it to fn; skipped are the loop: names that are templates.
func walkSubLoops(f *File, opts Options, fn func(state, ref string, child *File) error) (skipped []string, err error) {
	seen := map[string]bool{}
	var walk func(f *File) error
	walk = func(f *File) error {
		for _, sn := range slices.Sorted(maps.Keys(f.Loop.Spec.States)) {
			ref := f.Loop.Spec.States[sn].Loop
			switch {
			case ref == "" || seen[ref]:
				continue
			case interpolate.HasReferences(ref):
				skipped = append(skipped, fmt.Sprintf("states.%s.loop: %q is a template; upload the loops it names yourself", sn, ref))
				continue
			}
			seen[ref] = true
			child, err := loadRef(ref, opts.besideOf(f))
			if err != nil {
				return fmt.Errorf("states.%s.loop: %w", sn, err)
			}
			if err := fn(sn, ref, child); err != nil {
				return err
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	return skipped, walk(f)
}

// loadRef reads the loop a sub-loop state names, found as a local run
// finds it.
func loadRef(ref string, opts Options) (*File, error) {
	path, err := Resolve(ref, opts)
	if err != nil {
		return nil, err
	}
	return Load(path, opts)
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
