package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/specgate/specgate/kernels"
)

// Parse reads a GGUF file held in data. The File keeps data (tensor bytes are
// views of it), so data must not change while the File is in use; metadata is
// copied out.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	return r.file()
}

// reader decodes little-endian fields, checking each against the bytes left.
type reader struct {
	b   []byte
	off int
}

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) errorf(at int, format string, args ...any) error {
	return &FormatError{Offset: int64(at), Msg: fmt.Sprintf(format, args...)}
}

// need fails when fewer than n bytes remain; what names the field.
func (r *reader) need(n int, what func() string) error {
	if r.left() < n {
		return r.errorf(r.off, "%s: need %d bytes, only %d left (truncated file)", what(), n, r.left())
	}
	return nil
}

func (r *reader) u32(what func() string) (uint32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64(what func() string) (uint64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

// strBytes reads a length-prefixed string and returns its bytes (a view).
func (r *reader) strBytes(what func() string) ([]byte, error) {
	at := r.off
	n, err := r.u64(what)
	if err != nil {
		return nil, err
	}
	if n > uint64(r.left()) {
		return nil, r.errorf(at, "%s: string length %d exceeds the %d bytes left", what(), n, r.left())
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *reader) file() (*File, error) {
	top := func(s string) func() string { return func() string { return s } }
	if err := r.need(4, top("magic")); err != nil {
		return nil, err
	}
	if string(r.b[:4]) != Magic {
		return nil, r.errorf(0, "magic %q is not %q: not a GGUF file", r.b[:4], Magic)
	}
	r.off = 4
	version, err := r.u32(top("version"))
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case bits.ReverseBytes32(version) <= 3:
		return nil, r.errorf(4, "version field 0x%08x looks byte-swapped: big-endian files are not supported", version)
	case version == 1:
		return nil, r.errorf(4, "version 1 is not supported (only 2 and 3; convert the file with a newer llama.cpp)")
	default:
		return nil, r.errorf(4, "version %d is not supported (only 2 and 3)", version)
	}
	nt, err := r.u64(top("tensor count"))
	if err != nil {
		return nil, err
	}
	nkv, err := r.u64(top("metadata count"))
	if err != nil {
		return nil, err
	}
	// A key-value pair takes at least 13 bytes (key length, type, one byte
	// of value) and a tensor info 24 (name length, n_dims, type, offset),
	// so counts beyond what the file can hold fail before allocating.
	hiKV, loKV := bits.Mul64(nkv, 13)
	hiT, loT := bits.Mul64(nt, 24)
	sum, carry := bits.Add64(loKV, loT, 0)
	if hiKV != 0 || hiT != 0 || carry != 0 || sum > uint64(r.left()) {
		return nil, r.errorf(8, "%d tensors and %d metadata keys cannot fit in the %d bytes left", nt, nkv, r.left())
	}

	f := &File{
		Version:   version,
		Alignment: DefaultAlignment,
		kvs:       make([]kv, 0, nkv),
		keys:      make(map[string]int, nkv),
		Tensors:   make([]TensorInfo, 0, nt),
		tensors:   make(map[string]int, nt),
		data:      r.b,
	}
	for i := range nkv {
		if err := r.keyValue(f, i); err != nil {
			return nil, err
		}
	}
	if i, ok := f.keys[KeyAlignment]; ok {
		a, ok := toUint(f.kvs[i].val)
		if !ok || a == 0 || a > 1<<30 || a&(a-1) != 0 {
			return nil, r.errorf(r.off, "key %q: alignment %v is not a power of two up to 2^30", KeyAlignment, f.kvs[i].val)
		}
		f.Alignment = a
	}
	for i := range nt {
		if err := r.tensorInfo(f, i); err != nil {
			return nil, err
		}
	}
	// Tensor data starts at the next multiple of the alignment.
	f.DataOffset = alignUp(uint64(r.off), f.Alignment)
	if err := r.placeTensors(f); err != nil {
		return nil, err
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func (r *reader) keyValue(f *File, i uint64) error {
	at := r.off
	kb, err := r.strBytes(func() string { return fmt.Sprintf("metadata key %d", i) })
	if err != nil {
		return err
	}
	key := string(kb)
	if _, dup := f.keys[key]; dup {
		return r.errorf(at, "metadata key %q appears twice", key)
	}
	name := func() string { return fmt.Sprintf("key %q", key) }
	t, err := r.u32(name)
	if err != nil {
		return err
	}
	v, err := r.value(t, 0, name)
	if err != nil {
		return err
	}
	f.keys[key] = len(f.kvs)
	f.kvs = append(f.kvs, kv{key, v})
	return nil
}

// scalarSize returns the encoded size of a fixed-size type, or for a string
// or array its smallest encoding, used to bound element counts; 0 means the
// type is unknown.
func scalarSize(t uint32) int {
	switch t {
	case typeUint8, typeInt8, typeBool:
		return 1
	case typeUint16, typeInt16:
		return 2
	case typeUint32, typeInt32, typeFloat32:
		return 4
	case typeUint64, typeInt64, typeFloat64, typeString:
		return 8
	case typeArray:
		return 12
	}
	return 0
}

// value decodes one value of type t.
func (r *reader) value(t uint32, depth int, what func() string) (any, error) {
	at := r.off
	if t == typeArray {
		return r.array(depth, what)
	}
	if t == typeString {
		b, err := r.strBytes(what)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
	n := scalarSize(t)
	if n == 0 {
		return nil, r.errorf(at-4, "%s: unknown value type %d", what(), t)
	}
	if err := r.need(n, what); err != nil {
		return nil, err
	}
	b := r.b[r.off:]
	r.off += n
	switch t {
	case typeUint8:
		return b[0], nil
	case typeInt8:
		return int8(b[0]), nil
	case typeBool:
		if b[0] > 1 {
			return nil, r.errorf(at, "%s: bool byte %d is neither 0 nor 1", what(), b[0])
		}
		return b[0] == 1, nil
	case typeUint16:
		return binary.LittleEndian.Uint16(b), nil
	case typeInt16:
		return int16(binary.LittleEndian.Uint16(b)), nil
	case typeUint32:
		return binary.LittleEndian.Uint32(b), nil
	case typeInt32:
		return int32(binary.LittleEndian.Uint32(b)), nil
	case typeFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	case typeUint64:
		return binary.LittleEndian.Uint64(b), nil
	case typeInt64:
		return int64(binary.LittleEndian.Uint64(b)), nil
	default: // typeFloat64
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	}
}

// array decodes an array's element type, count and elements into a typed
// slice, so that big arrays (a 128k-token vocabulary) cost one allocation
// rather than one boxed value per element.
func (r *reader) array(depth int, what func() string) (any, error) {
	at := r.off
	if depth >= maxDepth {
		return nil, r.errorf(at, "%s: arrays nested deeper than %d", what(), maxDepth)
	}
	et, err := r.u32(what)
	if err != nil {
		return nil, err
	}
	size := scalarSize(et)
	if size == 0 {
		return nil, r.errorf(at, "%s: unknown array element type %d", what(), et)
	}
	cat := r.off
	n64, err := r.u64(what)
	if err != nil {
		return nil, err
	}
	if n64 > uint64(r.left()/size) {
		return nil, r.errorf(cat, "%s: array of %d %s elements cannot fit in the %d bytes left", what(), n64, typeName(et), r.left())
	}
	n := int(n64)
	b := r.b[r.off:]
	switch et {
	case typeUint8:
		r.off += n
		return slices.Clone(b[:n:n]), nil
	case typeInt8:
		r.off += n
		return decode(n, func(i int) int8 { return int8(b[i]) }), nil
	case typeBool:
		for i, c := range b[:n] {
			if c > 1 {
				return nil, r.errorf(r.off+i, "%s: element %d: bool byte %d is neither 0 nor 1", what(), i, c)
			}
		}
		r.off += n
		return decode(n, func(i int) bool { return b[i] == 1 }), nil
	case typeUint16:
		r.off += 2 * n
		return decode(n, func(i int) uint16 { return binary.LittleEndian.Uint16(b[2*i:]) }), nil
	case typeInt16:
		r.off += 2 * n
		return decode(n, func(i int) int16 { return int16(binary.LittleEndian.Uint16(b[2*i:])) }), nil
	case typeUint32:
		r.off += 4 * n
		return decode(n, func(i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }), nil
	case typeInt32:
		r.off += 4 * n
		return decode(n, func(i int) int32 { return int32(binary.LittleEndian.Uint32(b[4*i:])) }), nil
	case typeFloat32:
		r.off += 4 * n
		return decode(n, func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }), nil
	case typeUint64:
		r.off += 8 * n
		return decode(n, func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }), nil
	case typeInt64:
		r.off += 8 * n
		return decode(n, func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }), nil
	case typeFloat64:
		r.off += 8 * n
		return decode(n, func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }), nil
	case typeString:
		return r.strings(n, what)
	default: // typeArray
		out := make([]any, n)
		for i := range out {
			elem := func() string { return fmt.Sprintf("%s: element %d", what(), i) }
			if out[i], err = r.array(depth+1, elem); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

func decode[T any](n int, at func(int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = at(i)
	}
	return out
}

// strings decodes n strings. It checks every length first, then copies the
// whole run once and points the strings into that copy, so a vocabulary of
// 128k tokens is two allocations instead of 128k.
func (r *reader) strings(n int, what func() string) ([]string, error) {
	start := r.off
	for i := range n {
		at := r.off
		if r.left() < 8 {
			return nil, r.errorf(at, "%s: element %d: need 8 bytes, only %d left (truncated file)", what(), i, r.left())
		}
		l := binary.LittleEndian.Uint64(r.b[at:])
		r.off += 8
		if l > uint64(r.left()) {
			return nil, r.errorf(at, "%s: element %d: string length %d exceeds the %d bytes left", what(), i, l, r.left())
		}
		r.off += int(l)
	}
	buf := slices.Clone(r.b[start:r.off])
	out := make([]string, n)
	p := 0
	for i := range out {
		l := int(binary.LittleEndian.Uint64(buf[p:]))
		p += 8
		if l > 0 {
			// buf is never written again, so the strings may share it.
			out[i] = unsafe.String(&buf[p], l)
		}
		p += l
	}
	return out, nil
}

func (r *reader) tensorInfo(f *File, i uint64) error {
	at := r.off
	nb, err := r.strBytes(func() string { return fmt.Sprintf("tensor %d name", i) })
	if err != nil {
		return err
	}
	name := string(nb)
	if _, dup := f.tensors[name]; dup {
		return r.errorf(at, "tensor %q appears twice", name)
	}
	what := func() string { return fmt.Sprintf("tensor %q", name) }
	nd, err := r.u32(what)
	if err != nil {
		return err
	}
	if nd > maxDims {
		return r.errorf(r.off-4, "tensor %q: %d dimensions, at most %d allowed", name, nd, maxDims)
	}
	dims := make([]uint64, nd)
	elems := uint64(1)
	for j := range dims {
		if dims[j], err = r.u64(what); err != nil {
			return err
		}
		hi, lo := bits.Mul64(elems, dims[j])
		if hi != 0 || lo > math.MaxInt64 {
			return r.errorf(r.off-8, "tensor %q: dims %v overflow the element count", name, dims[:j+1])
		}
		elems = lo
	}
	t, err := r.u32(what)
	if err != nil {
		return err
	}
	dt := kernels.DType(t)
	tr, ok := typeTraits[dt]
	if !ok {
		return r.errorf(r.off-4, "tensor %q: unknown tensor type %d", name, t)
	}
	cols := uint64(1)
	if nd > 0 {
		cols = dims[0]
	}
	if cols%tr.elems != 0 {
		return r.errorf(r.off-4, "tensor %q: row length %d is not a whole number of %d-element %v blocks", name, cols, tr.elems, dt)
	}
	hi, size := bits.Mul64(elems/tr.elems, tr.bytes)
	if hi != 0 || size > math.MaxInt64 {
		return r.errorf(r.off-4, "tensor %q: %d elements of %v overflow the byte size", name, elems, dt)
	}
	off, err := r.u64(what)
	if err != nil {
		return err
	}
	f.tensors[name] = len(f.Tensors)
	f.Tensors = append(f.Tensors, TensorInfo{Name: name, Dims: dims, Type: dt, Offset: off, Size: size})
	return nil
}

// placeTensors turns relative offsets into absolute ones and checks that
// every tensor is aligned, inside the file and clear of the others.
func (r *reader) placeTensors(f *File) error {
	infoEnd := r.off
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return r.errorf(infoEnd, "tensor %q: data offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		abs, c1 := bits.Add64(t.Offset, f.DataOffset, 0)
		end, c2 := bits.Add64(abs, t.Size, 0)
		if c1 != 0 || c2 != 0 || end > uint64(len(r.b)) {
			return r.errorf(infoEnd, "tensor %q: data [%d, %d+%d) runs past the end of the %d-byte file", t.Name, t.Offset+f.DataOffset, t.Offset+f.DataOffset, t.Size, len(r.b))
		}
		t.Offset = abs
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := f.Tensors[a], f.Tensors[b]
		if ta.Offset != tb.Offset {
			return cmpU64(ta.Offset, tb.Offset)
		}
		return cmpU64(ta.Size, tb.Size)
	})
	for k := 1; k < len(order); k++ {
		a, b := f.Tensors[order[k-1]], f.Tensors[order[k]]
		if a.Size > 0 && b.Size > 0 && a.Offset+a.Size > b.Offset {
			return r.errorf(int(b.Offset), "tensor %q: data overlaps tensor %q", b.Name, a.Name)
		}
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
