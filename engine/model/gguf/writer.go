package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/specgate/specgate/kernels"
)

// Writer builds a GGUF version 3 file: metadata in the order it is set and
// tensors in the order they are added, each tensor's data aligned to the
// general.alignment key (DefaultAlignment when unset) and padded with zeros,
// as llama.cpp writes them. The zero value is ready to use; a Writer is not
// safe for concurrent use.
type Writer struct {
	kvs     []kv
	keys    map[string]int
	tensors []wtensor
	names   map[string]bool
	err     error // the first error of a setter that cannot return one
}

type wtensor struct {
	name string
	dt   kernels.DType
	dims []uint64
	size uint64
	data []byte
	fill func([]byte) error
}

// Set sets key to v, replacing (in place) an earlier value of the same key.
// v is one of the types File.Value returns: uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool, string, a slice of
// one of those, or []any whose elements are such slices (nested arrays).
func (w *Writer) Set(key string, v any) error {
	if key == "" {
		return errors.New("gguf: empty metadata key")
	}
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if w.keys == nil {
		w.keys = map[string]int{}
	}
	if i, ok := w.keys[key]; ok {
		w.kvs[i].val = v
		return nil
	}
	w.keys[key] = len(w.kvs)
	w.kvs = append(w.kvs, kv{key, v})
	return nil
}

// set is Set for the typed setters, whose values are valid by type; an
// empty key is kept as an error for WriteTo.
func (w *Writer) set(key string, v any) {
	if err := w.Set(key, v); err != nil && w.err == nil {
		w.err = err
	}
}

// The typed setters are Set for one type each. They cannot fail on the
// value; an empty key is reported by WriteTo.

func (w *Writer) SetUint8(key string, v uint8)        { w.set(key, v) }
func (w *Writer) SetInt8(key string, v int8)          { w.set(key, v) }
func (w *Writer) SetUint16(key string, v uint16)      { w.set(key, v) }
func (w *Writer) SetInt16(key string, v int16)        { w.set(key, v) }
func (w *Writer) SetUint32(key string, v uint32)      { w.set(key, v) }
func (w *Writer) SetInt32(key string, v int32)        { w.set(key, v) }
func (w *Writer) SetUint64(key string, v uint64)      { w.set(key, v) }
func (w *Writer) SetInt64(key string, v int64)        { w.set(key, v) }
func (w *Writer) SetFloat32(key string, v float32)    { w.set(key, v) }
func (w *Writer) SetFloat64(key string, v float64)    { w.set(key, v) }
func (w *Writer) SetBool(key string, v bool)          { w.set(key, v) }
func (w *Writer) SetString(key string, v string)      { w.set(key, v) }
func (w *Writer) SetStrings(key string, v []string)   { w.set(key, v) }
func (w *Writer) SetFloat32s(key string, v []float32) { w.set(key, v) }
func (w *Writer) SetInt32s(key string, v []int32)     { w.set(key, v) }
func (w *Writer) SetUint32s(key string, v []uint32)   { w.set(key, v) }
func (w *Writer) SetInt64s(key string, v []int64)     { w.set(key, v) }
func (w *Writer) SetUint64s(key string, v []uint64)   { w.set(key, v) }
func (w *Writer) SetFloat64s(key string, v []float64) { w.set(key, v) }
func (w *Writer) SetBools(key string, v []bool)       { w.set(key, v) }
func (w *Writer) SetUint8s(key string, v []uint8)     { w.set(key, v) }

// SetArrays sets an array of arrays; each element must be a typed slice or
// a nested []any.
func (w *Writer) SetArrays(key string, v []any) error { return w.Set(key, v) }

// SetAlignment sets general.alignment, the tensor data alignment in bytes (a
// power of two; 32 when unset).
func (w *Writer) SetAlignment(alignment uint32) { w.set(KeyAlignment, alignment) }

// checkValue reports whether v can be encoded and read back: arrays nest
// no deeper than the reader allows.
func checkValue(v any, depth int) error {
	switch v := v.(type) {
	case uint8, int8, uint16, int16, uint32, int32, uint64, int64, float32, float64, bool, string:
		if depth > 0 {
			return fmt.Errorf("%T is not an array", v)
		}
		return nil
	case []any:
		if depth >= maxDepth {
			return fmt.Errorf("arrays nested deeper than %d", maxDepth)
		}
		for i, e := range v {
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}
	if isSlice(v) {
		if depth >= maxDepth {
			return fmt.Errorf("arrays nested deeper than %d", maxDepth)
		}
		return nil
	}
	return fmt.Errorf("cannot encode a %T", v)
}

func isSlice(v any) bool {
	switch v.(type) {
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64, []float32, []float64, []bool, []string:
		return true
	}
	return false
}

// AddTensor adds a tensor of type dt with dims in GGUF order (Dims[0] is the
// row length) whose bytes are data. The Writer keeps data, without copying,
// until WriteTo returns.
func (w *Writer) AddTensor(name string, dt kernels.DType, dims []uint64, data []byte) error {
	size, err := w.addCheck(name, dt, dims)
	if err != nil {
		return err
	}
	if uint64(len(data)) != size {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, want %d for %v %v", name, len(data), size, dt, dims)
	}
	w.add(wtensor{name: name, dt: dt, dims: dims, size: size, data: data})
	return nil
}

// AddTensorFunc adds a tensor whose bytes are made while writing: fill gets
// a buffer of exactly the tensor's size (reused between tensors, so fill must
// not keep it) and must fill all of it. It lets big models be written a
// tensor at a time instead of held in memory whole.
func (w *Writer) AddTensorFunc(name string, dt kernels.DType, dims []uint64, fill func(dst []byte) error) error {
	size, err := w.addCheck(name, dt, dims)
	if err != nil {
		return err
	}
	if fill == nil {
		return fmt.Errorf("gguf: tensor %q: nil fill function", name)
	}
	w.add(wtensor{name: name, dt: dt, dims: dims, size: size, fill: fill})
	return nil
}

func (w *Writer) add(t wtensor) {
	if w.names == nil {
		w.names = map[string]bool{}
	}
	t.dims = append([]uint64(nil), t.dims...)
	w.names[t.name] = true
	w.tensors = append(w.tensors, t)
}

// addCheck validates a tensor and returns its size in bytes.
func (w *Writer) addCheck(name string, dt kernels.DType, dims []uint64) (uint64, error) {
	if name == "" {
		return 0, errors.New("gguf: empty tensor name")
	}
	if w.names[name] {
		return 0, fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) > maxDims {
		return 0, fmt.Errorf("gguf: tensor %q: %d dimensions, at most %d allowed", name, len(dims), maxDims)
	}
	tr, ok := typeTraits[dt]
	if !ok {
		return 0, fmt.Errorf("gguf: tensor %q: unknown tensor type %d", name, uint32(dt))
	}
	elems := uint64(1)
	for _, d := range dims {
		if d != 0 && elems > math.MaxInt64/d {
			return 0, fmt.Errorf("gguf: tensor %q: dims %v overflow the element count", name, dims)
		}
		elems *= d
	}
	if len(dims) > 0 && dims[0]%tr.elems != 0 {
		return 0, fmt.Errorf("gguf: tensor %q: row length %d is not a whole number of %d-element %v blocks", name, dims[0], tr.elems, dt)
	}
	if elems/tr.elems > math.MaxInt64/tr.bytes {
		return 0, fmt.Errorf("gguf: tensor %q: %d elements of %v overflow the byte size", name, elems, dt)
	}
	return elems / tr.elems * tr.bytes, nil
}

// alignment returns the alignment the file will use.
func (w *Writer) alignment() (uint64, error) {
	i, ok := w.keys[KeyAlignment]
	if !ok {
		return DefaultAlignment, nil
	}
	a, ok := toUint(w.kvs[i].val)
	if !ok || a == 0 || a > 1<<30 || a&(a-1) != 0 {
		return 0, fmt.Errorf("gguf: key %q: alignment %v is not a power of two up to 2^30", KeyAlignment, w.kvs[i].val)
	}
	return a, nil
}

// countWriter counts bytes and keeps the first write error.
type countWriter struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (c *countWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func (c *countWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(c.buf[:], v)
	c.write(c.buf[:4])
}

func (c *countWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(c.buf[:], v)
	c.write(c.buf[:8])
}

func (c *countWriter) str(s string) {
	c.u64(uint64(len(s)))
	if c.err == nil {
		n, err := c.w.WriteString(s)
		c.n += int64(n)
		c.err = err
	}
}

var zeros [1 << 12]byte

func (c *countWriter) pad(align uint64) {
	if r := uint64(c.n) % align; r != 0 {
		for n := align - r; n > 0; {
			k := min(n, uint64(len(zeros)))
			c.write(zeros[:k])
			n -= k
		}
	}
}

// WriteTo writes the file to out and returns the bytes written.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	align, err := w.alignment()
	if err != nil {
		return 0, err
	}
	c := &countWriter{w: bufio.NewWriterSize(out, 1<<16)}
	c.write([]byte(Magic))
	c.u32(3)
	c.u64(uint64(len(w.tensors)))
	c.u64(uint64(len(w.kvs)))
	for _, e := range w.kvs {
		c.str(e.key)
		writeValue(c, e.val)
	}
	off := uint64(0)
	var maxSize uint64
	for _, t := range w.tensors {
		c.str(t.name)
		c.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			c.u64(d)
		}
		c.u32(uint32(t.dt))
		c.u64(off)
		off = alignUp(off+t.size, align)
		if t.fill != nil {
			maxSize = max(maxSize, t.size)
		}
	}
	c.pad(align)
	var buf []byte
	if maxSize > 0 {
		if maxSize > uint64(maxInt) {
			return c.n, fmt.Errorf("gguf: tensor of %d bytes is too large", maxSize)
		}
		buf = make([]byte, maxSize)
	}
	for _, t := range w.tensors {
		data := t.data
		if t.fill != nil {
			data = buf[:t.size]
			if err := t.fill(data); err != nil {
				return c.n, fmt.Errorf("gguf: tensor %q: %w", t.name, err)
			}
		}
		c.write(data)
		c.pad(align)
	}
	if c.err == nil {
		c.err = c.w.Flush()
	}
	if c.err != nil {
		return c.n, fmt.Errorf("gguf: write: %w", c.err)
	}
	return c.n, nil
}

// WriteFile writes the file to path, replacing it.
func (w *Writer) WriteFile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if _, err := w.WriteTo(fh); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

func valueType(v any) uint32 {
	switch v.(type) {
	case uint8:
		return typeUint8
	case int8:
		return typeInt8
	case uint16:
		return typeUint16
	case int16:
		return typeInt16
	case uint32:
		return typeUint32
	case int32:
		return typeInt32
	case uint64:
		return typeUint64
	case int64:
		return typeInt64
	case float32:
		return typeFloat32
	case float64:
		return typeFloat64
	case bool:
		return typeBool
	case string:
		return typeString
	}
	return typeArray
}

// writeValue writes a type id and a value checked by checkValue.
func writeValue(c *countWriter, v any) {
	t := valueType(v)
	c.u32(t)
	if t == typeArray {
		writeArray(c, v)
		return
	}
	writeScalar(c, v)
}

func writeScalar(c *countWriter, v any) {
	switch v := v.(type) {
	case uint8:
		c.write([]byte{v})
	case int8:
		c.write([]byte{byte(v)})
	case bool:
		b := byte(0)
		if v {
			b = 1
		}
		c.write([]byte{b})
	case uint16:
		binary.LittleEndian.PutUint16(c.buf[:], v)
		c.write(c.buf[:2])
	case int16:
		binary.LittleEndian.PutUint16(c.buf[:], uint16(v))
		c.write(c.buf[:2])
	case uint32:
		c.u32(v)
	case int32:
		c.u32(uint32(v))
	case float32:
		c.u32(math.Float32bits(v))
	case uint64:
		c.u64(v)
	case int64:
		c.u64(uint64(v))
	case float64:
		c.u64(math.Float64bits(v))
	case string:
		c.str(v)
	}
}

// writeArray writes an array's element type, count and elements. The
// common big arrays (a vocabulary's tokens, scores and types) are written
// without boxing each element.
func writeArray(c *countWriter, v any) {
	switch s := v.(type) {
	case []uint8:
		c.u32(typeUint8)
		c.u64(uint64(len(s)))
		c.write(s)
	case []string:
		c.u32(typeString)
		c.u64(uint64(len(s)))
		for _, e := range s {
			c.str(e)
		}
	case []float32:
		c.u32(typeFloat32)
		c.u64(uint64(len(s)))
		for _, e := range s {
			c.u32(math.Float32bits(e))
		}
	case []int32:
		c.u32(typeInt32)
		c.u64(uint64(len(s)))
		for _, e := range s {
			c.u32(uint32(e))
		}
	case []uint32:
		c.u32(typeUint32)
		c.u64(uint64(len(s)))
		for _, e := range s {
			c.u32(e)
		}
	case []int8:
		arrayOf(c, typeInt8, s)
	case []bool:
		arrayOf(c, typeBool, s)
	case []uint16:
		arrayOf(c, typeUint16, s)
	case []int16:
		arrayOf(c, typeInt16, s)
	case []uint64:
		arrayOf(c, typeUint64, s)
	case []int64:
		arrayOf(c, typeInt64, s)
	case []float64:
		arrayOf(c, typeFloat64, s)
	case []any:
		c.u32(typeArray)
		c.u64(uint64(len(s)))
		for _, e := range s {
			writeArray(c, e)
		}
	}
}

func arrayOf[T any](c *countWriter, t uint32, s []T) {
	c.u32(t)
	c.u64(uint64(len(s)))
	for _, e := range s {
		writeScalar(c, e)
	}
}

// FileType returns general.file_type (llama.cpp's LLAMA_FTYPE_*) for a
// file whose weights are mostly dt: the common types (K-quants as their
// _M mixes); others give 0, "mostly F32", which readers use only as a
// label.
func FileType(dt kernels.DType) uint32 {
	switch dt {
	case kernels.F16:
		return 1
	case kernels.Q4_0:
		return 2
	case kernels.Q8_0:
		return 7
	case kernels.Q4_K:
		return 15
	case kernels.Q5_K:
		return 17
	case kernels.Q6_K:
		return 18
	case kernels.BF16:
		return 32
	}
	return 0
}
