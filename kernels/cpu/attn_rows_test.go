package cpu

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/kernels"
)

var updateAttnGolden = flag.Bool("update-attn", false, "rewrite testdata/attn-golden.txt from the current attention kernels")

// seqRowsCase is several query rows of one sequence: causal rows ending at
// lens, or tree rows over one prefix, each seeing a chain of the slots
// after it (a draft chain verified in one call).
type seqRowsCase struct {
	name                   string
	heads, kvHeads, hd, bs int
	dt                     kernels.DType
	lens                   []int32 // causal rows' lengths
	prefix                 int32   // with tree: the rows' shared prefix
	tree                   int     // tree rows (0: causal)
}

func (c seqRowsCase) String() string {
	return fmt.Sprintf("%s/%v/heads=%d/kv=%d/hd=%d", c.name, c.dt, c.heads, c.kvHeads, c.hd)
}

// run computes the case's rows in one call on b, or each alone when alone
// is set, and returns the outputs, row-major.
func (c seqRowsCase) run(t testing.TB, b *Backend, kv *KV, qs []float32, alone bool) []float32 {
	t.Helper()
	a := kernels.Attn{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.hd}
	blocks := kv.spec.Blocks
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32((i*7 + 3) % blocks) // scattered, every block once
	}
	var tree []kernels.TreeRow
	if c.tree > 0 {
		var chain []int32
		for i := range c.tree {
			p := int(c.prefix) + i
			chain = append(chain, table[p/c.bs]*int32(c.bs)+int32(p%c.bs))
			a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: c.prefix})
			tree = append(tree, kernels.TreeRow{Prefix: c.prefix, Slots: slices.Clone(chain)})
		}
	} else {
		for _, n := range c.lens {
			a.Rows = append(a.Rows, kernels.AttnRow{Table: table, Len: n})
		}
	}
	qw := c.heads * c.hd
	rows := len(a.Rows)
	out := make([]float32, rows*qw)
	call := func(r0, r1 int) {
		one := a
		one.Rows = a.Rows[r0:r1]
		q, d := b.Alloc(r1-r0, qw), b.Alloc(r1-r0, qw)
		b.Upload(q, qs[r0*qw:r1*qw])
		if tree != nil {
			b.TreeAttention(d, q, kv, 0, one, kernels.TreeMask{Rows: tree[r0:r1]})
		} else {
			b.Attention(d, q, kv, 0, one)
		}
		b.Download(out[r0*qw:r1*qw], d)
	}
	if !alone {
		call(0, rows)
		return out
	}
	for r := range rows {
		call(r, r+1)
	}
	return out
}

func seqRowsCases() []seqRowsCase {
	var cs []seqRowsCase
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16} {
		for _, g := range []struct{ heads, kvHeads, hd int }{{128, 64, 8}, {16, 4, 8}, {8, 2, 64}, {4, 4, 128}, {6, 2, 12}} {
			base := seqRowsCase{heads: g.heads, kvHeads: g.kvHeads, hd: g.hd, bs: 16, dt: dt}
			causal, short, tree := base, base, base
			// 300 and more are split into parts (attnPart).
			causal.name, causal.lens = "causal", []int32{298, 299, 300, 301, 302, 303, 600, 601}
			short.name, short.lens = "short", []int32{1, 2, 3, 17, 18, 40}
			tree.name, tree.prefix, tree.tree = "tree", 283, 5
			cs = append(cs, causal, short, tree)
		}
	}
	return cs
}

// seqRowsFixture is a case's cache and queries, drawn from its name.
func seqRowsFixture(t testing.TB, b *Backend, c seqRowsCase) (*KV, []float32) {
	t.Helper()
	h := sha256.Sum256([]byte(c.String()))
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(h[:8]), 77))
	spec := kernels.KVSpec{Layers: 1, Blocks: 640/c.bs + 1, BlockSize: c.bs, Width: c.kvHeads * c.hd, DType: c.dt}
	kv := treeFixture(t, b, r, spec, 0)
	rows := max(len(c.lens), c.tree)
	return kv, randVals(r, rows*c.heads*c.hd, 2)
}

// TestAttentionSeqRowsAlone checks that rows of one sequence computed in
// one call (a prefill chunk, a verified draft chain or tree) get the bits
// each gets alone, on 1 to 3 threads, for narrow and wide heads, grouped
// query heads, and contexts of many blocks and of several parts.
func TestAttentionSeqRowsAlone(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		b := open(t, threads)
		for _, c := range seqRowsCases() {
			t.Run(fmt.Sprintf("threads=%d/%v", threads, c), func(t *testing.T) {
				kv, qs := seqRowsFixture(t, b, c)
				together := c.run(t, b, kv, qs, false)
				alone := c.run(t, b, kv, qs, true)
				qw := c.heads * c.hd
				for r := range len(together) / qw {
					if !slices.EqualFunc(together[r*qw:(r+1)*qw], alone[r*qw:(r+1)*qw], sameBits) {
						t.Errorf("row %d: together and alone differ", r)
					}
				}
			})
		}
	}
}

// TestAttentionGolden checks the assembly kernels' attention against the
// bits they gave when testdata/attn-golden.txt was written (go test
// -run TestAttentionGolden -update-attn): a rewrite of a kernel's loops
// must keep every row's arithmetic, so its outputs stay the same to the
// bit, and a model's tokens with them.
func TestAttentionGolden(t *testing.T) {
	asmKernels(t)
	path := filepath.Join("testdata", "attn-golden.txt")
	b := open(t, 2)
	var lines []string
	for _, c := range seqRowsCases() {
		kv, qs := seqRowsFixture(t, b, c)
		out := c.run(t, b, kv, qs, false)
		h := sha256.New()
		for _, x := range out {
			binary.Write(h, binary.LittleEndian, math.Float32bits(x))
		}
		lines = append(lines, c.String()+" "+hex.EncodeToString(h.Sum(nil)))
	}
	if *updateAttnGolden {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, sum, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		want[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		name, sum, _ := strings.Cut(l, " ")
		if w, ok := want[name]; !ok {
			t.Errorf("%s: no golden sum", name)
		} else if w != sum {
			t.Errorf("%s: the outputs' bits changed", name)
		}
	}
}
