package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "7e61d5a1"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-27T20:00:00Z"},
	}}
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{name: "no build info", want: Info{Version: "dev", GoVersion: runtime.Version()}},
		{name: "a git checkout", bi: vcs,
			want: Info{Version: "dev", GitCommit: "7e61d5a1", GitTreeState: "dirty", CommitDate: "2026-11-27T20:00:00Z", GoVersion: "go1.99.1"}},
		{name: "the Makefile's -ldflags", version: "0.1.0", commit: "abc", bi: vcs,
			want: Info{Version: "0.1.0", GitCommit: "abc", GitTreeState: "dirty", CommitDate: "2026-11-27T20:00:00Z", GoVersion: "go1.99.1"}},
		{name: "go install at a tag", bi: &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v0.2.0"}},
			want: Info{Version: "v0.2.0", GoVersion: "go1.99.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got := fromBuild(tc.version, tc.commit, tc.bi); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
