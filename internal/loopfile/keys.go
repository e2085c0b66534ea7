package loopfile

import (
	"maps"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A little-loops mapping is read through one table per struct it becomes:
// each key the struct takes maps to the reader that stores it, and the keys
// little-loops knows but looprun does not use map to why (the warning).

// key reads the value of key k (at path fp) of m into the struct.
type key[T any] func(r *reader, m map[string]any, k, fp string, into *T)

// table is the keys of one struct of a little-loops file.
type table[T any] struct {
	// keys are the keys read; a nil reader is a key read elsewhere.
	keys map[string]key[T]
	// ignored are the keys little-loops knows and looprun does not use,
	// with why ("": silently).
	ignored map[string]string
	// unknown handles any other key, given the nearest known key as
	// didYouMean says it; nil warns that it is unknown.
	unknown func(r *reader, m map[string]any, k, fp, hint string, into *T)
}

// names are the keys the table knows, read or ignored, sorted.
func (tb *table[T]) names() []string {
	names := append(slices.Collect(maps.Keys(tb.keys)), slices.Collect(maps.Keys(tb.ignored))...)
	slices.Sort(names)
	return names
}

// read reads m into into, key by key in sorted order; path is where m is.
func (tb *table[T]) read(r *reader, m map[string]any, path string, into *T) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fp := k
		if path != "" {
			fp = path + "." + k
		}
		if read, ok := tb.keys[k]; ok {
			if read != nil {
				read(r, m, k, fp, into)
			}
			continue
		}
		if why, ok := tb.ignored[k]; ok {
			if why != "" {
				r.ignore(fp, why)
			}
			continue
		}
		hint := didYouMean(k, tb.names())
		if tb.unknown != nil {
			tb.unknown(r, m, k, fp, hint, into)
			continue
		}
		r.warn("%s: unknown key; ignored%s", fp, hint)
	}
}

// The readers of plain fields, each given where the field is.

func strKey[T any](field func(*T) *string) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) { *field(into) = r.str(m, k, fp) }
}

func boolKey[T any](field func(*T) *bool) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) { *field(into) = r.boolean(m, k, fp) }
}

func boolPtrKey[T any](field func(*T) **bool) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) {
		b := r.boolean(m, k, fp)
		*field(into) = &b
	}
}

func int32Key[T any](field func(*T) **int32) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) { *field(into) = r.int32p(m, k, fp) }
}

func numberKey[T any](field func(*T) **float64) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) {
		f := r.number(m, k, fp)
		*field(into) = &f
	}
}

func durationKey[T any](field func(*T) **metav1.Duration) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) { *field(into) = r.duration(m, k, fp) }
}

func stringsKey[T any](field func(*T) *[]string) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) { *field(into) = r.strings(m, k, fp) }
}

func jsonKey[T any](field func(*T) **apiextensionsv1.JSON) key[T] {
	return func(r *reader, m map[string]any, k, _ string, into *T) {
		j := r.order.toJSON(m[k])
		*field(into) = &j
	}
}

// nestedKey reads a mapping through its own table into a new N.
func nestedKey[T, N any](keys *table[N], field func(*T) **N) key[T] {
	return func(r *reader, m map[string]any, k, fp string, into *T) {
		nm, ok := m[k].(map[string]any)
		if !ok {
			r.fail("%s: must be a mapping", fp)
			return
		}
		n := new(N)
		keys.read(r, nm, fp, n)
		*field(into) = n
	}
}
