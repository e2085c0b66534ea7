package main

import (
	"bytes"
	"testing"
)

// TestTable: a list as kubectl get prints it (columns three spaces apart),
// a describe block (two spaces, indented, fields as "Key:").
func TestTable(t *testing.T) {
	var b bytes.Buffer
	list := newTable(&b, "NAME", "ITERATION", "AGE")
	list.row("count", 6, "3m")
	list.row("a-longer-name", 12, "5h")
	if err := list.flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME            ITERATION   AGE\n" +
		"count           6           3m\n" +
		"a-longer-name   12          5h\n"
	if b.String() != want {
		t.Errorf("list:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	fields := newFields(&b, "")
	fields.field("Name", "%s", "count")
	fields.field("Iteration", "%d of %d", 6, 50)
	conds := newFields(&b, "  ", "TYPE", "STATUS")
	if err := fields.flush(); err != nil {
		t.Fatal(err)
	}
	conds.row("Ready", "True")
	if err := conds.flush(); err != nil {
		t.Fatal(err)
	}
	want = "Name:       count\n" +
		"Iteration:  6 of 50\n" +
		"  TYPE   STATUS\n" +
		"  Ready  True\n"
	if b.String() != want {
		t.Errorf("describe block:\n%s\nwant:\n%s", b.String(), want)
	}
}
