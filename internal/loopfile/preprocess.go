package loopfile

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/looprun/looprun/internal/safefile"
)

// deepMerge returns base overlaid with over: objects merge key by key,
// everything else (scalars, lists) is replaced. Its keys are in base's
// order, then those over adds, as little-loops merges them.
func deepMerge(order keyOrder, base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = deepMerge(order, bm, om)
				continue
			}
		}
		out[k] = v
	}
	order.merged(out, base, over)
	return out
}

// findFile resolves a referenced loop or library: a path relative to the
// referring file, then the loops directory, then the library path, with
// .yaml and .fsm.yaml tried.
func (r *reader) findFile(ref, dir string) (string, error) {
	var tried []string
	find := func(bases []string) string {
		for _, base := range bases {
			for _, ext := range []string{"", ".yaml", ".fsm.yaml"} {
				p := ref + ext
				if !filepath.IsAbs(p) {
					p = filepath.Join(base, p)
				}
				tried = append(tried, p)
				if st, err := os.Stat(p); err == nil && !st.IsDir() {
					return p
				}
			}
		}
		return ""
	}
	if p := find(append([]string{dir}, r.opts.searchDirs()...)); p != "" {
		return p, nil
	}
	b := ""
	if !filepath.IsAbs(ref) {
		if b = r.opts.bundled(); b != "" {
			if p := find([]string{b}); p != "" {
				return p, nil
			}
		}
	}
	return "", r.opts.notFound(fmt.Errorf("%q not found (tried %s)", ref, strings.Join(tried, ", ")), b != "" || filepath.IsAbs(ref))
}

// decode reads a file a loop refers to, as strictly as the loop itself;
// its warnings name the file.
func (r *reader) decode(path string, data []byte) (map[string]any, error) {
	checked, err := checkYAML(data)
	if err != nil {
		return nil, err
	}
	for _, w := range checked.warnings {
		r.warn("%s: %s", path, w)
	}
	return decodeYAML(checked.data, r.order)
}

// inherit resolves from: PARENT, parent first, child winning.
func (r *reader) inherit(doc map[string]any, dir string, seen map[string]bool) (map[string]any, error) {
	parentRef, ok := doc["from"].(string)
	if !ok {
		if _, present := doc["from"]; present {
			return nil, errors.New("from: must name a loop")
		}
		return doc, nil
	}
	path, err := r.findFile(parentRef, dir)
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	abs, _ := filepath.Abs(path)
	if seen[abs] {
		return nil, fmt.Errorf("from: inheritance cycle through %s", path)
	}
	seen[abs] = true
	data, err := safefile.Read(path, safefile.MaxLoopFile)
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	parent, err := r.decode(path, data)
	if err != nil {
		return nil, fmt.Errorf("from: %s: %w", path, err)
	}
	parent, err = r.inherit(parent, filepath.Dir(path), seen)
	if err != nil {
		return nil, err
	}
	child := make(map[string]any, len(doc))
	for k, v := range doc {
		if k != "from" {
			child[k] = v
		}
	}
	return deepMerge(r.order, parent, child), nil
}

// flow expands flow: [a, b, "c?yes:no", d] into states.
func flow(doc map[string]any, order keyOrder) error {
	raw, ok := doc["flow"]
	if !ok {
		return nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return errors.New("flow: must be a non-empty list of state names")
	}
	defs, _ := doc["state_defs"].(map[string]any)
	states := map[string]any{}
	for i, e := range list {
		entry, ok := e.(string)
		if !ok || strings.TrimSpace(entry) == "" {
			return fmt.Errorf("flow[%d]: must be a state name", i)
		}
		st := map[string]any{}
		name := entry
		if q := strings.Index(entry, "?"); q >= 0 {
			name = entry[:q]
			yes, no, ok := strings.Cut(entry[q+1:], ":")
			if !ok || name == "" || yes == "" || no == "" {
				return fmt.Errorf("flow[%d]: %q must read state?yes_target:no_target", i, entry)
			}
			st["on_yes"], st["on_no"] = yes, no
		} else if i < len(list)-1 {
			next, _ := list[i+1].(string)
			if q := strings.Index(next, "?"); q >= 0 {
				next = next[:q]
			}
			st["next"] = next
		}
		if i == len(list)-1 {
			st["terminal"] = true // the last entry, a ternary too, as in little-loops
		}
		if d, ok := defs[name].(map[string]any); ok {
			st = deepMerge(order, st, d)
		}
		states[name] = st
	}
	doc["states"] = states
	delete(doc, "flow")
	delete(doc, "state_defs")
	return nil
}

// fragments applies import: libraries and local fragments: to states that
// say fragment: NAME (the state's own keys win).
func (r *reader) fragments(doc map[string]any, dir string) error {
	lib := map[string]any{}
	if imports, ok := doc["import"]; ok {
		list, ok := imports.([]any)
		if !ok {
			return errors.New("import: must be a list of library files")
		}
		for i, it := range list {
			ref, _ := it.(string)
			path, err := r.findFile(ref, dir)
			if err != nil {
				return fmt.Errorf("import[%d]: %w", i, err)
			}
			data, err := safefile.Read(path, safefile.MaxLoopFile)
			if err != nil {
				return fmt.Errorf("import[%d]: %w", i, err)
			}
			ldoc, err := r.decode(path, data)
			if err != nil {
				return fmt.Errorf("import[%d]: %s: %w", i, path, err)
			}
			fr, ok := ldoc["fragments"].(map[string]any)
			if !ok {
				return fmt.Errorf("import[%d]: %s defines no fragments: an import names a library of fragments", i, path)
			}
			for k, v := range fr {
				lib[k] = v
			}
		}
	}
	if fr, ok := doc["fragments"].(map[string]any); ok {
		for k, v := range fr {
			lib[k] = v
		}
	}
	delete(doc, "import")
	delete(doc, "fragments")
	states, _ := doc["states"].(map[string]any)
	for name, raw := range states {
		st, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		ref, ok := st["fragment"].(string)
		if !ok {
			continue
		}
		frag, ok := lib[ref].(map[string]any)
		if !ok {
			return fmt.Errorf("states.%s.fragment: no fragment %q in the imported libraries or the fragments section", name, ref)
		}
		base := make(map[string]any, len(frag))
		for k, v := range frag {
			if k != "parameters" && k != "description" {
				base[k] = v
			}
		}
		merged := deepMerge(r.order, base, st)
		delete(merged, "fragment")
		delete(merged, "description")
		// with on a fragment state binds the fragment's ${param.*}.
		params, err := fragmentParams(name, ref, merged["with"], frag["parameters"])
		if err != nil {
			return err
		}
		delete(merged, "with")
		if len(params) > 0 {
			merged[fragmentParamsKey] = params
		}
		states[name] = merged
	}
	return nil
}

// fragmentParamsKey carries a fragment state's parameter bindings from the
// fragment pass to the state reader (it is no key of a loop file).
const fragmentParamsKey = "\x00fragment_params"

// fragmentParams binds a fragment's parameters: the state's with, then
// the defaults the fragment declares; a required one left unbound is an
// error.
func fragmentParams(state, fragment string, with, declared any) (map[string]any, error) {
	out := map[string]any{}
	if with != nil {
		w, ok := with.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("states.%s.with: must be a mapping of fragment parameters to values", state)
		}
		for k, v := range w {
			out[k] = v
		}
	}
	decl, _ := declared.(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(decl)) {
		spec, _ := decl[name].(map[string]any)
		if _, bound := out[name]; bound {
			continue
		}
		if req, _ := spec["required"].(bool); req {
			return nil, fmt.Errorf("states.%s.with: fragment %q requires parameter %q", state, fragment, name)
		}
		if d, ok := spec["default"]; ok && d != nil {
			out[name] = d
		}
	}
	return out, nil
}
