package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time (make build: -ldflags -X main.version=…);
// without it the module version or the VCS commit the go tool recorded is
// printed.
var version = ""

func runVersion(ctx context.Context, args []string) error {
	fs := newFlags("version", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Println(versionString())
	return nil
}

func versionString() string {
	v, commit, dirty, goVer := version, "", false, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVer = bi.GoVersion
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	out := "specgate " + v
	if commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if dirty {
			commit += "-dirty"
		}
		out += " (commit " + commit + ")"
	}
	if goVer != "" {
		out += " " + goVer
	}
	return out
}
