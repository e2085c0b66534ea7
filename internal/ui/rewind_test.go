package ui

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/runner/local"
)

// driverOf is a driver of the loop file path's run in dir, as looprun run
// and resume make it.
func driverOf(t *testing.T, dir, path string) *localrun.Driver {
	t.Helper()
	lf, err := loopfile.Load(path, loopfile.Options{LoopsDir: filepath.Join(dir, ".loops")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{LittleLoops: true})
	if err != nil {
		t.Fatal(err)
	}
	store, err := localrun.NewStore(filepath.Join(dir, ".loops"), lf.Loop.Name)
	if err != nil {
		t.Fatal(err)
	}
	return &localrun.Driver{Machine: m, Runner: &local.Runner{Dir: dir}, Store: store, LoopFile: path}
}

// visitsOf is how often each state was entered, by the graph.
func visitsOf(d Detail) map[string]int {
	out := map[string]int{}
	for _, n := range d.Nodes {
		out[n.Name] = n.Visits
	}
	return out
}

func edgesOf(d Detail) map[string]int32 {
	out := map[string]int32{}
	for _, e := range d.Edges {
		out[e.From+"->"+e.To] = e.Count
	}
	return out
}

// A rewound run's page is of its current timeline: the graph's visit and
// edge counts, what each state last did and the timeline's rows leave out
// the visits the rewind abandoned (it says how many), whether the page was
// read before the rewind or not; once resumed, the new visits follow the
// checkpoint's.
func TestARewoundRunShowsItsCurrentTimeline(t *testing.T) {
	s := &Server{}
	dir, path, followed := servedCountRun(t, s)
	var before Detail
	get(t, followed, "/api/loops/local/count", &before) // the page of the whole run, followed
	if v := visitsOf(before); v["check"] != 6 || v["bump"] != 5 {
		t.Fatalf("before the rewind: %v", v)
	}

	// Back to the checkpoint of iteration 4: check, bump, check, bump were
	// run; iterations 5 to 11 are abandoned.
	d := driverOf(t, dir, path)
	it := int32(4)
	if _, err := d.Store.Rewind(d.Machine, &it, path, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	check := func(what, srv string, want map[string]int, edges map[string]int32, rows int, lastCheck string, maxIt int32) {
		t.Helper()
		servers := map[string]*httptest.Server{"followed": followed, "fresh": httptest.NewServer((&Server{LoopsDir: s.LoopsDir}).Handler())}
		defer servers["fresh"].Close()
		var got Detail
		get(t, servers[srv], "/api/loops/local/count", &got)
		v := visitsOf(got)
		for state, n := range want {
			if v[state] != n {
				t.Errorf("%s (%s): %s entered %d times, want %d (%v)", what, srv, state, v[state], n, v)
			}
		}
		e := edgesOf(got)
		for edge, n := range edges {
			if e[edge] != n {
				t.Errorf("%s (%s): edge %s taken %d times, want %d (%v)", what, srv, edge, e[edge], n, e)
			}
		}
		if l := got.States["check"]; l.Output != lastCheck || l.Iteration > maxIt {
			t.Errorf("%s (%s): the last of check %+v, want %q", what, srv, l, lastCheck)
		}
		if len(got.Rewinds) != 1 || got.Rewinds[0].Iteration != 4 || got.Rewinds[0].FromIteration != 11 || got.Rewinds[0].Abandoned != 7 {
			t.Errorf("%s (%s): rewinds %+v", what, srv, got.Rewinds)
		}
		var p Page
		get(t, servers[srv], "/api/loops/local/count/timeline", &p)
		if p.Total != rows {
			t.Errorf("%s (%s): %d rows, want %d: %+v", what, srv, p.Total, rows, p.Visits)
		}
		seen := 0
		for _, row := range p.Visits {
			seen += 1 + row.Repeat*row.Period
			if row.Seq > got.Rewinds[0].Seq != (row.Iteration > 4) {
				t.Errorf("%s (%s): a row of the abandoned timeline: %+v", what, srv, row)
			}
		}
		if seen != v["check"]+v["bump"] {
			t.Errorf("%s (%s): the rows hold %d visits, the graph %v", what, srv, seen, v)
		}
	}
	// A server that followed the run before the rewind, and one that reads
	// it afresh.
	for _, name := range []string{"followed", "fresh"} {
		check("rewound", name, map[string]int{"check": 2, "bump": 2, "done": 0},
			map[string]int32{"check->bump": 2, "bump->check": 2, "check->done": 0}, 2, "n=1", 4)
	}

	// Resumed from the checkpoint (its counter put back too): check runs
	// at n=2, 3, 4 and 5 again.
	if err := os.WriteFile(filepath.Join(dir, "n"), []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sf, err := d.Store.Load()
	if err != nil {
		t.Fatal(err)
	}
	run, err := sf.RunState()
	if err != nil {
		t.Fatal(err)
	}
	if err := driverOf(t, dir, path).Resume(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"followed", "fresh"} {
		// check, bump (x2) before the rewind; check, bump (x3), check after.
		check("resumed", name, map[string]int{"check": 6, "bump": 5, "done": 1},
			map[string]int32{"check->bump": 5, "bump->check": 5, "check->done": 1}, 5, "n=5", 11)
	}
}
