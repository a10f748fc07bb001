package gguf

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/specgate/specgate/kernels"
)

// TestReleaseDropsPages maps a file with a 4 MiB tensor between two small
// ones, reads it all, and releases the big one: the mapping's resident
// size falls by about the tensor's size, its bytes still read back the
// same (mapped again from the file), and the neighbours' bytes, which may
// share its first and last pages, are untouched.
func TestReleaseDropsPages(t *testing.T) {
	var w Writer
	w.SetAlignment(32)
	small := bytes.Repeat([]byte{1, 2, 3, 4}, 100)
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>12)
	}
	for _, tt := range []struct {
		name string
		data []byte
	}{{"a", small}, {"big", big}, {"z", small}} {
		if err := w.AddTensor(tt.name, kernels.F32, []uint64{uint64(len(tt.data) / 4)}, tt.data); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, ok := f.Tensor("big")
	if !ok {
		t.Fatal("no tensor big")
	}
	var sum int // reading every byte makes every page resident
	for _, b := range f.Bytes() {
		sum += int(b)
	}
	if sum == 0 {
		t.Fatal("the file reads as zeros")
	}
	before := mappingRss(t, f.Bytes())
	if err := f.Release(ti); err != nil {
		t.Fatal(err)
	}
	after := mappingRss(t, f.Bytes())
	if drop := before - after; drop < 4<<20-2*os.Getpagesize() {
		t.Fatalf("resident %d KiB before, %d KiB after: want about 4096 KiB less", before>>10, after>>10)
	}
	for _, name := range []string{"a", "z"} {
		ni, _ := f.Tensor(name)
		if !bytes.Equal(f.Data(ni), small) {
			t.Fatalf("tensor %s changed after releasing its neighbour", name)
		}
	}
	if !bytes.Equal(f.Data(ti), big) {
		t.Fatal("the released tensor does not read back the same")
	}
}

// mappingRss returns the resident bytes of the mapping that holds b, from
// /proc/self/smaps.
func mappingRss(t *testing.T, b []byte) int {
	t.Helper()
	fh, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("the kernel map of this process cannot be read: %v", err)
	}
	defer fh.Close()
	p := uint64(uintptr(unsafe.Pointer(&b[0])))
	in := false
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := addrRange(line); ok {
			in = lo <= p && p < hi
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "Rss:"), "kB")))
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal(fmt.Errorf("no mapping holds %#x: %v", p, sc.Err()))
	return 0
}

// addrRange parses a smaps header line ("lo-hi perms ...").
func addrRange(line string) (lo, hi uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0, 0, false
	}
	a, b, found := strings.Cut(f[0], "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(a, 16, 64)
	hi, err2 := strconv.ParseUint(b, 16, 64)
	return lo, hi, err1 == nil && err2 == nil
}
