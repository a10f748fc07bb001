// Package seeded draws a tensor's weights from seeded generators, for the
// model writers that make weights up (synth's random models, inflate's
// added units and noise). The rows are cut into fixed chunks, each drawn
// from a generator of its own keyed by the chunk's index, and the chunks
// are spread over every core: the bytes depend on the seed and the chunk
// size alone, never on how many goroutines drew them.
package seeded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/specgate/specgate/kernels"
)

// TensorSeed mixes a model's seed with a tensor's place and name, so
// tensors differ from each other and do not change when others are added.
func TensorSeed(seed int64, i int, name string) [2]uint64 {
	h := fnv.New64a()
	io.WriteString(h, name)
	return [2]uint64{uint64(seed), h.Sum64() ^ uint64(i)<<48}
}

// Chunk is one chunk's share of Fill: Vals holds rows [Row, Row+len(Vals)/
// cols) of the tensor, row-major, to be written; Src is the chunk's own
// generator. Vals is reused by the next chunk its goroutine draws.
type Chunk struct {
	Row  int
	Vals []float32
	Src  *rand.PCG
}

// Fill makes a rows × cols tensor encoded as dt in dst: fill writes each
// chunk of chunkRows rows (the last may be shorter), then Fill encodes it.
// fill runs on several goroutines at once, each chunk once; it must write
// every value and read nothing but its Chunk and what no chunk writes.
func Fill(dst []byte, dt kernels.DType, rows, cols, chunkRows int, seed [2]uint64, fill func(Chunk)) error {
	rowBytes, err := dt.RowBytes(cols)
	if err != nil {
		return err
	}
	if chunkRows < 1 {
		return fmt.Errorf("seeded: %d rows a chunk", chunkRows)
	}
	if len(dst) != rows*rowBytes {
		return fmt.Errorf("seeded: %d bytes for %d rows of %d", len(dst), rows, rowBytes)
	}
	chunks := (rows + chunkRows - 1) / chunkRows
	workers := min(runtime.GOMAXPROCS(0), chunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for wi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, chunkRows*cols)
			for {
				c := int(next.Add(1)) - 1
				if c >= chunks {
					return
				}
				r0 := c * chunkRows
				n := min(chunkRows, rows-r0)
				vals := buf[:n*cols]
				fill(Chunk{Row: r0, Vals: vals, Src: rand.NewPCG(seed[0], seed[1]+uint64(c)*0x9e3779b97f4a7c15)})
				if err := encode(dst[r0*rowBytes:(r0+n)*rowBytes], dt, vals); err != nil {
					errs[wi] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// encode writes vals into dst as dt: F32 directly, other types through
// kernels.Quantize.
func encode(dst []byte, dt kernels.DType, vals []float32) error {
	if dt == kernels.F32 {
		for i, v := range vals {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	}
	q, err := kernels.Quantize(dt, vals)
	if err != nil {
		return err
	}
	copy(dst, q)
	return nil
}
