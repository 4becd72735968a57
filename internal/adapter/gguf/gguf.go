// Package gguf owns Switchyard's GGUF support: a writer for the GGUF v3
// container that llama.cpp and Ollama load (typed metadata key/values, then
// tensor descriptors, then aligned tensor data) and TinyLlama, which builds
// a small Llama-architecture model with seeded random weights and a
// byte-level vocabulary. The tiny model is how the project runs a real
// inference engine in CI without downloading one: its text is gibberish,
// but the engine that serves it is real. Production only writes; a reader
// for the same subset lives in the tests (read_test.go), which read every
// written file back.
//
// The format follows ggml's docs/gguf.md: little-endian throughout, strings
// as a uint64 length then bytes, tensor dimensions innermost first (ne[0]),
// tensor data offsets relative to the start of the data section, each
// aligned to general.alignment (32 by default).
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic uint32 = 0x46554747

// Version is the GGUF version this package writes.
const Version uint32 = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is a metadata value's type tag.
type ValueType uint32

// Metadata value types (gguf.md, gguf_metadata_value_type).
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// TensorType is ggml's element type. Only F32 is written: the tiny model is
// small enough that quantisation would save nothing worth the complexity.
type TensorType uint32

// TensorF32 is ggml's GGML_TYPE_F32.
const TensorF32 TensorType = 0

// KV is one metadata entry. Value is one of: uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a slice
// of one of those ([]string, []float32, []int32, ...).
type KV struct {
	Key   string
	Value any
}

// Tensor is one named F32 tensor. Dims are innermost first, as ggml counts
// them: a weight matrix mapping n_in to n_out is {n_in, n_out}, stored as
// n_out rows of n_in contiguous values.
type Tensor struct {
	Name string
	Dims []uint64
	Data []float32
}

// Elements is the product of the tensor's dimensions.
func (t Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a GGUF file's content: ordered metadata and tensors.
type File struct {
	KV      []KV
	Tensors []Tensor
}

// Get returns the metadata value under key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

func (f *File) alignment() uint64 {
	if v, ok := f.Get("general.alignment"); ok {
		if a, ok := v.(uint32); ok && a > 0 {
			return uint64(a)
		}
	}
	return DefaultAlignment
}

// Write encodes f as GGUF v3. Tensors whose data length does not match
// their dimensions, duplicate keys or tensor names, and values of a type
// GGUF cannot hold are errors, reported before anything is written.
func (f *File) Write(w io.Writer) error {
	if err := f.check(); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(f.Tensors)))
	e.u64(uint64(len(f.KV)))
	for _, kv := range f.KV {
		e.str(kv.Key)
		e.value(kv.Value)
	}
	align := f.alignment()
	var offset uint64
	for _, t := range f.Tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(TensorF32))
		e.u64(offset)
		offset = alignUp(offset+4*t.Elements(), align)
	}
	e.pad(align)
	start := e.n
	for _, t := range f.Tensors {
		for _, x := range t.Data {
			e.u32(math.Float32bits(x))
		}
		e.padFrom(start, align)
	}
	if e.err != nil {
		return fmt.Errorf("gguf: write: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

func (f *File) check() error {
	keys := map[string]bool{}
	for _, kv := range f.KV {
		if kv.Key == "" {
			return errors.New("gguf: empty metadata key")
		}
		if keys[kv.Key] {
			return fmt.Errorf("gguf: duplicate metadata key %q", kv.Key)
		}
		keys[kv.Key] = true
		if _, _, err := typeOf(kv.Value); err != nil {
			return fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
	}
	names := map[string]bool{}
	for _, t := range f.Tensors {
		switch {
		case t.Name == "":
			return errors.New("gguf: tensor with no name")
		case names[t.Name]:
			return fmt.Errorf("gguf: duplicate tensor %q", t.Name)
		case len(t.Dims) == 0 || len(t.Dims) > 4:
			return fmt.Errorf("gguf: tensor %q has %d dimensions, want 1-4", t.Name, len(t.Dims))
		case uint64(len(t.Data)) != t.Elements():
			return fmt.Errorf("gguf: tensor %q: %d values for dimensions %v (%d elements)", t.Name, len(t.Data), t.Dims, t.Elements())
		}
		names[t.Name] = true
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// typeOf names a Go value's GGUF type; for a slice, the element type too.
func typeOf(v any) (ValueType, ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, 0, nil
	case int8:
		return TypeInt8, 0, nil
	case uint16:
		return TypeUint16, 0, nil
	case int16:
		return TypeInt16, 0, nil
	case uint32:
		return TypeUint32, 0, nil
	case int32:
		return TypeInt32, 0, nil
	case float32:
		return TypeFloat32, 0, nil
	case bool:
		return TypeBool, 0, nil
	case string:
		return TypeString, 0, nil
	case uint64:
		return TypeUint64, 0, nil
	case int64:
		return TypeInt64, 0, nil
	case float64:
		return TypeFloat64, 0, nil
	case []uint8:
		return TypeArray, TypeUint8, nil
	case []int8:
		return TypeArray, TypeInt8, nil
	case []uint16:
		return TypeArray, TypeUint16, nil
	case []int16:
		return TypeArray, TypeInt16, nil
	case []uint32:
		return TypeArray, TypeUint32, nil
	case []int32:
		return TypeArray, TypeInt32, nil
	case []float32:
		return TypeArray, TypeFloat32, nil
	case []bool:
		return TypeArray, TypeBool, nil
	case []string:
		return TypeArray, TypeString, nil
	case []uint64:
		return TypeArray, TypeUint64, nil
	case []int64:
		return TypeArray, TypeInt64, nil
	case []float64:
		return TypeArray, TypeFloat64, nil
	}
	return 0, 0, fmt.Errorf("unsupported value type %T", v)
}

// encoder writes little-endian values, remembering the first error and the
// byte count (for alignment).
type encoder struct {
	w   io.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u8(v uint8) { e.buf[0] = v; e.write(e.buf[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:2], v)
	e.write(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.write(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.write(e.buf[:8])
}
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.write([]byte(s)) }

func (e *encoder) pad(align uint64) { e.padFrom(0, align) }

// padFrom writes zeros until the count since start is a multiple of align.
func (e *encoder) padFrom(start, align uint64) {
	for (e.n-start)%align != 0 {
		e.u8(0)
	}
}

// value writes a type tag and the value; typeOf has vetted it.
func (e *encoder) value(v any) {
	t, elem, _ := typeOf(v)
	e.u32(uint32(t))
	if t != TypeArray {
		e.scalar(v)
		return
	}
	e.u32(uint32(elem))
	switch s := v.(type) {
	case []uint8:
		array(e, s)
	case []int8:
		array(e, s)
	case []uint16:
		array(e, s)
	case []int16:
		array(e, s)
	case []uint32:
		array(e, s)
	case []int32:
		array(e, s)
	case []float32:
		array(e, s)
	case []bool:
		array(e, s)
	case []string:
		array(e, s)
	case []uint64:
		array(e, s)
	case []int64:
		array(e, s)
	case []float64:
		array(e, s)
	}
}

// array writes an array's count and elements (its type tags are written).
func array[T any](e *encoder, s []T) {
	e.u64(uint64(len(s)))
	for _, x := range s {
		e.scalar(x)
	}
}

func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}
