package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table writes aligned columns, the one way looprun prints a table.
// newTable makes a list as kubectl get prints one (a header in capitals,
// columns three spaces apart); newFields a block as kubectl describe prints
// one (columns two spaces apart, optionally indented, a header only when
// given).
type table struct {
	w      *tabwriter.Writer
	indent string
}

// newTable starts a list with a header row (none when no headers are
// given: the later lines of a watch).
func newTable(w io.Writer, headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)}
	if len(headers) > 0 {
		t.row(anys(headers)...)
	}
	return t
}

// newFields starts a describe block: "Key:\tvalue" rows, or an indented
// table under a title (headers when given).
func newFields(w io.Writer, indent string, headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), indent: indent}
	if len(headers) > 0 {
		t.row(anys(headers)...)
	}
	return t
}

// row writes a row, each cell as fmt.Sprint makes it.
func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t.w, t.indent+strings.Join(s, "\t"))
}

// field writes a "Key:\tvalue" row of a describe block.
func (t *table) field(key, format string, v ...any) {
	t.row(key+":", fmt.Sprintf(format, v...))
}

// flush writes the table out.
func (t *table) flush() error { return t.w.Flush() }

func anys(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}
