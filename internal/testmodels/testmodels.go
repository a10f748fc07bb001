// Package testmodels finds the real model files that tests run against.
//
// The files are test data kept outside the repository: the directory named
// by SPECGATE_TEST_MODELS, by default ../shared/models relative to the module
// root. Where a file is missing (a user's fresh clone) a test skips with a
// message; under CI=true it fails, because CI must run every test.
package testmodels

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Env names the variable that points at the model directory.
const Env = "SPECGATE_TEST_MODELS"

// Stories260K is the F32 TinyStories model; its quantized siblings follow.
const (
	Stories260K     = "stories260K.gguf"
	Stories260KQ8_0 = "stories260K-q8_0.gguf"
	Stories260KQ4_0 = "stories260K-q4_0.gguf"
)

// Dir returns the model directory (which may not exist).
func Dir() string {
	if d := os.Getenv(Env); d != "" {
		return d
	}
	return filepath.Join(moduleRoot(), "..", "shared", "models")
}

// RefDir returns the directory of reference outputs that sits beside the
// model directory.
func RefDir() string {
	if d := os.Getenv("SPECGATE_TEST_REFDATA"); d != "" {
		return d
	}
	return filepath.Join(Dir(), "..", "refdata")
}

// Path returns the path of the named model file, or skips tb (fails it
// under CI=true) when the file is absent.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	return need(tb, filepath.Join(Dir(), name))
}

// Ref returns the path of the named reference file, like Path.
func Ref(tb testing.TB, name string) string {
	tb.Helper()
	return need(tb, filepath.Join(RefDir(), name))
}

func need(tb testing.TB, p string) string {
	tb.Helper()
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("test data %s is missing (set %s): %v", p, Env, err)
		}
		tb.Skipf("test data %s is missing (set %s to the model directory): %v", p, Env, err)
	}
	return p
}

func moduleRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	// this file is <root>/internal/testmodels/testmodels.go
	return filepath.Join(filepath.Dir(file), "..", "..")
}
