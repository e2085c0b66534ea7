// Package loopfile reads loop files: Loop manifests (looprun.io/v1alpha1) and
// little-loops YAML files (snake_case, on_yes/on_no, max_steps, flow:,
// import:/fragment: libraries, from: inheritance). Both give the same Loop.
//
// Nothing is dropped silently: keys looprun does not know, or knows but does
// not support, are reported as warnings; features whose absence would change
// what the loop does (sub-loops, MCP actions) are errors.
package loopfile

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/safefile"
)

// Format names the kind of file a loop came from.
type Format string

// The formats.
const (
	FormatManifest    Format = "manifest"
	FormatLittleLoops Format = "little-loops"
)

// File is a loop read from a file.
type File struct {
	Loop     *v1alpha1.Loop
	Format   Format
	Warnings []string
	// Notice is one line naming the keys of the file that looprun does
	// without (a little-loops file's catalogue metadata, scope locks...):
	// nothing to change, so not a warning. "" for none.
	Notice string
	// InputKey is the context variable a run's positional input goes to
	// (little-loops' input_key; default "input"), and RequiredInputs the
	// context variables a run must not start without (required_inputs).
	InputKey       string
	RequiredInputs []string
	// Path is the file it was read from ("" when parsed from bytes).
	Path string
	// Parameters are the typed inputs a sub-loop state binds with with
	// (little-loops' parameters; a LoopTemplate's spec.parameters).
	Parameters map[string]v1alpha1.Parameter
	// lines are the lines of the file's keys by path (states.a.action).
	lines map[string]int
}

// Locate is a problem found in the loop's spec (at field, a path such as
// spec.states[a].action) said as the file says it: "line N: path: msg",
// the path as the file spells it (states.a.action in a little-loops
// file).
func (f *File) Locate(field, msg string) string {
	segs := fieldSegments(field)
	path := strings.Join(segs, ".")
	if f.LittleLoops() && len(segs) > 0 {
		path = littleLoopsPath(segs[1:], f.lines)
	}
	return locate(f.lines, path, msg)
}

// LittleLoops reports whether the loop was written in little-loops' format.
func (f *File) LittleLoops() bool { return f.Format == FormatLittleLoops }

// DefaultInputKey is where a run's positional input goes by default.
const DefaultInputKey = "input"

// Options say where to look for the files a loop refers to.
type Options struct {
	// LoopsDir holds named loops and libraries (default .loops).
	LoopsDir string
	// LibraryPath lists more directories of loops and libraries, searched
	// after LoopsDir: a little-loops install's bundled loops directory
	// (which holds lib/) makes its from: and import: references resolve.
	LibraryPath []string
	// Bundled finds the bundled loops directory of an installed
	// little-loops (FindBundled; "" for none), searched after LibraryPath
	// as ll-loop falls back to its own. It is asked only when a name or a
	// reference is found nowhere before it. nil: none is looked for.
	Bundled func() string
	// NotFound ends the error of a name or reference found nowhere, when
	// no bundled loops were found: what to set to find them.
	NotFound string
}

// bundled is the directory Bundled finds; "" for none.
func (o Options) bundled() string {
	if o.Bundled == nil {
		return ""
	}
	return o.Bundled()
}

// notFound is err, found nowhere, with what to set to find it when no
// bundled loops were searched.
func (o Options) notFound(err error, searchedBundled bool) error {
	if searchedBundled || o.NotFound == "" {
		return err
	}
	return fmt.Errorf("%w; %s", err, o.NotFound)
}

// searchDirs are the directories a name or a reference is looked up in,
// after the referring file's own.
func (o Options) searchDirs() []string {
	dir := o.LoopsDir
	if dir == "" {
		dir = ".loops"
	}
	return append([]string{dir}, o.LibraryPath...)
}

// Load reads the loop in path.
func Load(path string, opts Options) (*File, error) {
	data, err := safefile.Read(path, safefile.MaxLoopFile)
	if err != nil {
		return nil, err
	}
	f, err := parse(data, filepath.Dir(path), opts)
	if p := (*Problems)(nil); errors.As(err, &p) {
		return nil, &Problems{Path: path, List: p.List, Warnings: p.Warnings}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Parse reads a loop from data; relative references resolve against dir.
func Parse(data []byte, dir string, opts Options) (*File, error) {
	return parse(data, dir, opts)
}

// Resolve finds the file of a loop given as a path or a name: the path
// itself, then LoopsDir/NAME.yaml, NAME.fsm.yaml and NAME.yml.
func Resolve(nameOrPath string, opts Options) (string, error) {
	if st, err := os.Stat(nameOrPath); err == nil && !st.IsDir() {
		return nameOrPath, nil
	}
	dirs := opts.searchDirs()
	find := func(dirs []string) string {
		for _, dir := range dirs {
			for _, ext := range []string{".yaml", ".fsm.yaml", ".yml"} {
				p := filepath.Join(dir, nameOrPath+ext)
				if _, err := os.Stat(p); err == nil {
					return p
				}
			}
		}
		return ""
	}
	if p := find(dirs); p != "" {
		return p, nil
	}
	b := opts.bundled()
	if b != "" {
		if p := find([]string{b}); p != "" {
			return p, nil
		}
		dirs = append(dirs, b)
	}
	// A file name (x.yaml) that is not there is no bundled loop's name.
	noHint := b != "" || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml")
	return "", opts.notFound(fmt.Errorf("no loop file %q (looked for it as a path and in %s)", nameOrPath, strings.Join(dirs, ", ")), noHint)
}

func parse(data []byte, dir string, opts Options) (*File, error) {
	checked, err := checkYAML(data)
	if err != nil {
		return nil, err
	}
	order := keyOrder{}
	doc, err := decodeYAML(checked.data, order)
	if err != nil {
		return nil, err
	}
	_, kind := doc["kind"]
	_, apiVersion := doc["apiVersion"]
	if kind || apiVersion {
		f, err := parseManifest(checked)
		if err != nil {
			return nil, err
		}
		f.Warnings = append(checked.warnings, manifestRouteWarnings(&f.Loop.Spec, checked.lines)...)
		f.Warnings = append(f.Warnings, manifestStructureWarnings(&f.Loop.Spec, checked.lines)...)
		f.Warnings = append(f.Warnings, manifestPatternWarnings(&f.Loop.Spec, checked.lines)...)
		f.lines = checked.lines
		return f, nil
	}
	r := &reader{opts: opts, warnings: checked.warnings, lines: checked.lines, order: order}
	loop, err := r.littleLoops(doc, dir)
	if p := (*Problems)(nil); errors.As(err, &p) {
		p.Warnings = r.warnings // the file's warnings too, found in the same reading
	}
	if err != nil {
		return nil, err
	}
	return &File{Loop: loop, Format: FormatLittleLoops, Warnings: r.warnings, Notice: r.ignoredNotice(), lines: r.lines, InputKey: cmp.Or(r.inputKey, DefaultInputKey),
		RequiredInputs: r.requiredInputs, Parameters: r.parameters}, nil
}

// decodeYAML decodes a loop file's YAML into plain values as PyYAML reads
// it (little-loops' reader); numbers are json.Number. order learns the
// order of each mapping's keys.
func decodeYAML(data []byte, order keyOrder) (map[string]any, error) {
	v, err := decodePyYAML(data, order)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("a loop file must be a YAML mapping")
	}
	return m, nil
}

// parseManifest reads a Loop, or a LoopTemplate (a loop other loops run
// as a sub-loop), from a manifest.
func parseManifest(checked *checkedYAML) (*File, error) {
	data := checked.data
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("loop manifest: %w", err)
	}
	if meta.APIVersion != v1alpha1.GroupVersion.String() || (meta.Kind != "Loop" && meta.Kind != "LoopTemplate") {
		return nil, fmt.Errorf("expected apiVersion %s and kind Loop or LoopTemplate, got %q and %q", v1alpha1.GroupVersion, meta.APIVersion, meta.Kind)
	}
	into := reflect.TypeFor[v1alpha1.Loop]()
	if meta.Kind == "LoopTemplate" {
		into = reflect.TypeFor[v1alpha1.LoopTemplate]()
	}
	// A field that is wrong is reported and left out, so that the rest
	// decodes and every problem of the file is found at once.
	problems, failed := checkManifestFields(checked.doc, into, meta.Kind)
	if len(problems) > 0 {
		pruned, err := yaml3.Marshal(checked.doc)
		if err != nil {
			return nil, &Problems{List: problems, Warnings: checked.warnings}
		}
		data = pruned
	}
	// What is left that still does not decode is one more problem.
	undecoded := func(what string, err error) error {
		if len(problems) == 0 {
			return fmt.Errorf("%s: %w", what, err)
		}
		return &Problems{List: append(problems, fmt.Sprintf("%s: %v", what, err)), Warnings: checked.warnings}
	}
	f := &File{Format: FormatManifest, InputKey: DefaultInputKey}
	if meta.Kind == "LoopTemplate" {
		var t v1alpha1.LoopTemplate
		if err := yaml.UnmarshalStrict(data, &t); err != nil {
			return nil, undecoded("loop template manifest", err)
		}
		f.Loop = NewLoop(t.Name, t.Spec.LoopSpec)
		f.Loop.Namespace, f.Loop.Labels, f.Loop.Annotations = t.Namespace, t.Labels, t.Annotations
		f.Parameters = t.Spec.Parameters
	} else {
		var loop v1alpha1.Loop
		if err := yaml.UnmarshalStrict(data, &loop); err != nil {
			return nil, undecoded("loop manifest", err)
		}
		f.Loop = &loop
	}
	problems = append(problems, specProblems(&f.Loop.Spec, FormatManifest, checked.lines, failed)...)
	if len(problems) > 0 {
		slices.SortStableFunc(problems, byLine)
		return nil, &Problems{List: problems, Warnings: checked.warnings}
	}
	if f.Loop.Name == "" {
		return nil, errors.New("metadata.name is required")
	}
	return f, nil
}

var dnsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// KubernetesName turns a loop name into a valid object name.
func KubernetesName(name string) string {
	n := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	if n == "" {
		n = "loop"
	}
	return n
}

// NewLoop wraps a spec into a Loop object.
func NewLoop(name string, spec v1alpha1.LoopSpec) *v1alpha1.Loop {
	return &v1alpha1.Loop{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}
}
