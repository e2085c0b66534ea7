// Package version says which looprun a binary is: its version, the commit
// it was built from and the Go that built it.
//
// Version and GitCommit are set at link time (the Makefile's build target:
// -ldflags "-X github.com/looprun/looprun/internal/version.Version=0.1.0
// -X github.com/looprun/looprun/internal/version.GitCommit=..."); Version
// is the chart's appVersion, the version the chart labels the operator's
// Deployment with (app.kubernetes.io/version). Without them, Get falls back
// on what the Go toolchain records in the binary (runtime/debug): the
// module's version when built by go install, and the VCS revision when
// built in a git checkout.
package version

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X at link time; empty otherwise.
var (
	// Version is looprun's version, e.g. 0.1.0.
	Version string
	// GitCommit is the commit the binary was built from.
	GitCommit string
)

// Info is a binary's version, as looprun version prints it.
type Info struct {
	// Version is the release, or "dev" for a build of no release.
	Version string `json:"version"`
	// GitCommit is the commit built from, "" when not known.
	GitCommit string `json:"gitCommit,omitempty"`
	// GitTreeState is "dirty" when the checkout had changes, "clean" when
	// it had none, "" when not known.
	GitTreeState string `json:"gitTreeState,omitempty"`
	// CommitDate is the commit's time (RFC 3339), "" when not known.
	CommitDate string `json:"commitDate,omitempty"`
	// GoVersion is the Go that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get is this binary's version.
func Get() Info {
	return fromBuild(Version, GitCommit, readBuildInfo())
}

// readBuildInfo is what the toolchain recorded, nil when it recorded none.
func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// fromBuild makes an Info of the link-time values, completed by the build
// info where they are empty.
func fromBuild(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, GitCommit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		info.Version = cmp.Or(info.Version, "dev")
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	info.Version = cmp.Or(info.Version, "dev")
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if info.GitCommit == "" {
		info.GitCommit = settings["vcs.revision"]
	}
	switch settings["vcs.modified"] {
	case "true":
		info.GitTreeState = "dirty"
	case "false":
		info.GitTreeState = "clean"
	}
	info.CommitDate = settings["vcs.time"]
	return info
}
