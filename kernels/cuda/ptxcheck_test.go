//go:build !cuda

package cuda

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPTXStamp checks that the committed PTX was built from the committed
// CUDA sources: ptx.stamp (written by `make ptx`) must list exactly the
// .cu/.cuh sources and the .ptx files of this directory with their current
// sha256. It needs no CUDA toolkit, so CI runs it.
func TestPTXStamp(t *testing.T) {
	f, err := os.Open("ptx.stamp")
	if err != nil {
		t.Fatalf("%v: run make ptx and commit the result", err)
	}
	defer f.Close()
	stamped := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("ptx.stamp: bad line %q", line)
		}
		stamped[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pat := range []string{"*.cu", "*.cuh", "*.ptx"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	if !slices.ContainsFunc(files, func(n string) bool { return strings.HasSuffix(n, ".ptx") }) {
		t.Fatal("no .ptx files: run make ptx and commit the result")
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		want, ok := stamped[name]
		switch {
		case !ok:
			t.Errorf("%s is not in ptx.stamp: run make ptx", name)
		case hex.EncodeToString(h[:]) != want:
			if strings.HasSuffix(name, ".ptx") {
				t.Errorf("%s does not match ptx.stamp: it was edited by hand or not rebuilt with make ptx", name)
			} else {
				t.Errorf("%s changed since the PTX was built: run make ptx and commit the PTX and ptx.stamp", name)
			}
		}
		delete(stamped, name)
	}
	for name := range stamped {
		t.Errorf("ptx.stamp lists %s, which does not exist", name)
	}
}
