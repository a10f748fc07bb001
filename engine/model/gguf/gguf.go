// Package gguf reads and writes GGUF files, the model format of llama.cpp
// and GGML.
//
// A GGUF file is a header, typed metadata (key → value, in file order), a
// table of tensor infos and the tensors' bytes, each aligned to the file's
// alignment. Open maps a file read-only and Parse reads one from memory;
// both keep tensor bytes in place (Data returns views), while metadata is
// decoded once into typed Go values. Versions 2 and 3 are read; Writer writes
// version 3.
//
// The reader treats its input as hostile: every count and length is checked
// against the bytes that remain before anything is allocated, and every
// problem is an error (wrapping ErrFormat) that names the byte offset and the
// key or tensor involved, never a panic.
package gguf

import (
	"errors"
	"fmt"
	"math"

	"github.com/specgate/specgate/kernels"
)

// ErrFormat is wrapped by every error about a malformed or unsupported file.
var ErrFormat = errors.New("gguf: invalid file")

// FormatError describes what is wrong with a file and where.
type FormatError struct {
	// Offset is the byte offset in the file where the problem was found.
	Offset int64
	// Msg names the field, key or tensor and the problem.
	Msg string
}

func (e *FormatError) Error() string { return fmt.Sprintf("gguf: offset %d: %s", e.Offset, e.Msg) }

// Unwrap lets errors.Is(err, ErrFormat) match.
func (e *FormatError) Unwrap() error { return ErrFormat }

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment applies when a file has no general.alignment key.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the tensor data alignment.
const KeyAlignment = "general.alignment"

// maxDims is GGML_MAX_DIMS: llama.cpp refuses tensors with more dimensions.
const maxDims = 4

// maxDepth bounds nested arrays so a hostile file cannot recurse deeply.
const maxDepth = 16

// Metadata value type ids as the format defines them.
const (
	typeUint8   = 0
	typeInt8    = 1
	typeUint16  = 2
	typeInt16   = 3
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
	typeUint64  = 10
	typeInt64   = 11
	typeFloat64 = 12
)

func typeName(t uint32) string {
	switch t {
	case typeUint8:
		return "uint8"
	case typeInt8:
		return "int8"
	case typeUint16:
		return "uint16"
	case typeInt16:
		return "int16"
	case typeUint32:
		return "uint32"
	case typeInt32:
		return "int32"
	case typeFloat32:
		return "float32"
	case typeBool:
		return "bool"
	case typeString:
		return "string"
	case typeArray:
		return "array"
	case typeUint64:
		return "uint64"
	case typeInt64:
		return "int64"
	case typeFloat64:
		return "float64"
	}
	return fmt.Sprintf("type(%d)", t)
}

// typeTraits gives, for every GGML tensor type id, the elements per block and
// bytes per block. The reader knows all of GGML's types, not only the ones
// kernels computes with, so a file with k-quants still parses and a loader
// can say which tensor it cannot use; ids missing here (removed or future
// types) are rejected.
var typeTraits = map[kernels.DType]struct{ elems, bytes uint64 }{
	0:  {1, 4},     // F32
	1:  {1, 2},     // F16
	2:  {32, 18},   // Q4_0
	3:  {32, 20},   // Q4_1
	6:  {32, 22},   // Q5_0
	7:  {32, 24},   // Q5_1
	8:  {32, 34},   // Q8_0
	9:  {32, 36},   // Q8_1
	10: {256, 84},  // Q2_K
	11: {256, 110}, // Q3_K
	12: {256, 144}, // Q4_K
	13: {256, 176}, // Q5_K
	14: {256, 210}, // Q6_K
	15: {256, 292}, // Q8_K
	16: {256, 66},  // IQ2_XXS
	17: {256, 74},  // IQ2_XS
	18: {256, 98},  // IQ3_XXS
	19: {256, 50},  // IQ1_S
	20: {32, 18},   // IQ4_NL
	21: {256, 110}, // IQ3_S
	22: {256, 82},  // IQ2_S
	23: {256, 136}, // IQ4_XS
	24: {1, 1},     // I8
	25: {1, 2},     // I16
	26: {1, 4},     // I32
	27: {1, 8},     // I64
	28: {1, 8},     // F64
	29: {256, 56},  // IQ1_M
	30: {1, 2},     // BF16
	34: {256, 54},  // TQ1_0
	35: {256, 66},  // TQ2_0
	39: {32, 17},   // MXFP4
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	// Dims are in GGUF order: Dims[0] (ne0) is the row length, the number
	// of elements that are contiguous in memory.
	Dims []uint64
	Type kernels.DType
	// Offset is the absolute byte offset of the tensor's data in the file.
	Offset uint64
	// Size is the tensor's length in bytes.
	Size uint64
}

// Cols returns the row length Dims[0] (1 for a tensor without dims).
func (t TensorInfo) Cols() int {
	if len(t.Dims) == 0 {
		return 1
	}
	return int(t.Dims[0])
}

// Rows returns the number of rows, the product of Dims[1:] (1 for a vector).
func (t TensorInfo) Rows() int {
	n := 1
	for _, d := range t.Dims[min(1, len(t.Dims)):] {
		n *= int(d)
	}
	return n
}

// Elems returns the number of elements.
func (t TensorInfo) Elems() int { return t.Rows() * t.Cols() }

type kv struct {
	key string
	val any
}

// File is a parsed GGUF file. Its methods are safe for concurrent use, but
// not concurrently with Close. Slices returned by accessors are shared with
// the File and must not be modified.
type File struct {
	// Version is the format version, 2 or 3.
	Version uint32
	// Alignment is the tensor data alignment in bytes.
	Alignment uint64
	// DataOffset is the absolute offset where tensor data starts.
	DataOffset uint64
	// Tensors lists the tensors in file order.
	Tensors []TensorInfo

	kvs     []kv
	keys    map[string]int
	tensors map[string]int
	data    []byte
	unmap   func() error
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Data returns the bytes of t, a view of the file's memory (a read-only
// mapping for Open): it is valid until Close and must not be written. It
// returns nil when t does not lie inside the file (a TensorInfo from another
// file) or after Close.
func (f *File) Data(t TensorInfo) []byte {
	end := t.Offset + t.Size
	if end < t.Offset || end > uint64(len(f.data)) {
		return nil
	}
	return f.data[t.Offset:end:end]
}

// Release tells the file that t's data will not be read again soon: a
// backend that keeps its own copy of a weight (kernels.DataOwner) has made
// it. Where the file is mapped, the whole pages of t's data leave the
// process's memory; reading them later (Data stays valid) maps them back
// from the file. Elsewhere it does nothing.
func (f *File) Release(t TensorInfo) error {
	if f.unmap == nil {
		return nil
	}
	if err := releasePages(f.Data(t)); err != nil {
		return fmt.Errorf("gguf: release %s: %w", t.Name, err)
	}
	return nil
}

// Bytes returns the whole file, a view like Data.
func (f *File) Bytes() []byte { return f.data }

// Close releases the mapping made by Open; after it Data returns nil.
// Metadata stays readable. Closing twice, or a File from Parse, is a no-op.
func (f *File) Close() error {
	f.data = nil
	if f.unmap == nil {
		return nil
	}
	u := f.unmap
	f.unmap = nil
	if err := u(); err != nil {
		return fmt.Errorf("gguf: close: %w", err)
	}
	return nil
}

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string {
	keys := make([]string, len(f.kvs))
	for i, e := range f.kvs {
		keys[i] = e.key
	}
	return keys
}

// Value returns a metadata value as decoded: uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool or string for scalars;
// a typed slice ([]uint8 … []string) for an array; []any of typed slices for
// an array of arrays.
func (f *File) Value(key string) (any, bool) {
	i, ok := f.keys[key]
	if !ok {
		return nil, false
	}
	return f.kvs[i].val, true
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Value(key)
	s, ok := v.(string)
	return s, ok
}

// Uint returns an integer value of any integer type that is not negative.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Value(key)
	return toUint(v)
}

func toUint(v any) (uint64, bool) {
	switch v := v.(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	}
	if i, ok := toInt(v); ok && i >= 0 {
		return uint64(i), true
	}
	return 0, false
}

// Int returns an integer value of any integer type that fits an int64.
func (f *File) Int(key string) (int64, bool) {
	v, _ := f.Value(key)
	return toInt(v)
}

func toInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int8:
		return int64(v), true
	case int16:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), true
		}
	}
	return 0, false
}

// Float returns a float32 or float64 value, or an integer one converted.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Value(key)
	switch v := v.(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	case uint64:
		return float64(v), true
	}
	if i, ok := toInt(v); ok {
		return float64(i), true
	}
	return 0, false
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Value(key)
	b, ok := v.(bool)
	return b, ok
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Value(key)
	s, ok := v.([]string)
	return s, ok
}

// Float32s returns an array of float32 (a float64 array is converted).
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Value(key)
	switch v := v.(type) {
	case []float32:
		return v, true
	case []float64:
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out, true
	}
	return nil, false
}

// Int32s returns an array of int32; an array of another integer type is
// converted when every element fits.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Value(key)
	if s, ok := v.([]int32); ok {
		return s, true
	}
	return convInts[int32](v, math.MinInt32, math.MaxInt32)
}

// Uint32s returns an array of uint32; an array of another integer type is
// converted when every element fits.
func (f *File) Uint32s(key string) ([]uint32, bool) {
	v, _ := f.Value(key)
	if s, ok := v.([]uint32); ok {
		return s, true
	}
	return convInts[uint32](v, 0, math.MaxUint32)
}

func convInts[T int32 | uint32](v any, lo, hi int64) ([]T, bool) {
	var n int
	var at func(i int) (int64, bool)
	switch s := v.(type) {
	case []uint8:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []int8:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []uint16:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []int16:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []uint32:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []int32:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), true }
	case []int64:
		n, at = len(s), func(i int) (int64, bool) { return s[i], true }
	case []uint64:
		n, at = len(s), func(i int) (int64, bool) { return int64(s[i]), s[i] <= math.MaxInt64 }
	default:
		return nil, false
	}
	out := make([]T, n)
	for i := range out {
		x, ok := at(i)
		if !ok || x < lo || x > hi {
			return nil, false
		}
		out[i] = T(x)
	}
	return out, true
}
