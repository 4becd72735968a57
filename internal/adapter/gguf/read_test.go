package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Limits on what Read accepts, so a corrupt or hostile header cannot make
// it allocate without bound before the data runs out.
const (
	maxStringLen = 1 << 20
	maxArrayLen  = 1 << 24
	maxTensors   = 1 << 16
	maxKVs       = 1 << 16
)

// Read decodes a GGUF v2 or v3 file holding F32 tensors (what Write
// produces). Other tensor types are an error naming the tensor: this
// reader exists to check the files this package writes, not to load real
// quantised weights.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: bufio.NewReader(r)}
	if m := d.u32(); d.err == nil && m != Magic {
		return nil, fmt.Errorf("gguf: not a GGUF file (magic %#x)", m)
	}
	if v := d.u32(); d.err == nil && v != 2 && v != 3 {
		return nil, fmt.Errorf("gguf: unsupported version %d (want 2 or 3)", v)
	}
	nTensors, nKV := d.u64(), d.u64()
	if d.err != nil {
		return nil, fmt.Errorf("gguf: header: %w", d.err)
	}
	if nTensors > maxTensors || nKV > maxKVs {
		return nil, fmt.Errorf("gguf: header claims %d tensors and %d keys, over this reader's limits", nTensors, nKV)
	}
	f := &File{}
	for i := uint64(0); i < nKV; i++ {
		key := d.str()
		t := ValueType(d.u32())
		v := d.value(t)
		if d.err != nil {
			return nil, fmt.Errorf("gguf: metadata %d (%q): %w", i, key, d.err)
		}
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	type info struct {
		offset uint64
	}
	infos := make([]info, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		name := d.str()
		nDims := d.u32()
		if d.err == nil && (nDims == 0 || nDims > 4) {
			return nil, fmt.Errorf("gguf: tensor %q has %d dimensions", name, nDims)
		}
		dims := make([]uint64, nDims)
		for j := range dims {
			dims[j] = d.u64()
		}
		typ := TensorType(d.u32())
		off := d.u64()
		if d.err != nil {
			return nil, fmt.Errorf("gguf: tensor info %d: %w", i, d.err)
		}
		if typ != TensorF32 {
			return nil, fmt.Errorf("gguf: tensor %q has ggml type %d; this reader handles F32 (0) only", name, typ)
		}
		t := Tensor{Name: name, Dims: dims}
		if t.Elements() > maxArrayLen {
			return nil, fmt.Errorf("gguf: tensor %q has %d elements, over this reader's limit", name, t.Elements())
		}
		f.Tensors = append(f.Tensors, t)
		infos = append(infos, info{offset: off})
	}
	align := f.alignment()
	d.skip(alignUp(d.n, align) - d.n)
	start := d.n
	for i := range f.Tensors {
		t := &f.Tensors[i]
		at := start + infos[i].offset
		if at < d.n {
			return nil, fmt.Errorf("gguf: tensor %q at offset %d overlaps the previous one", t.Name, infos[i].offset)
		}
		d.skip(at - d.n)
		// Grown as the data arrives: a header that lies about sizes runs
		// out of bytes before it can make this allocate much.
		t.Data = readArray(d, t.Elements(), func() float32 { return math.Float32frombits(d.u32()) })
		if d.err != nil {
			return nil, fmt.Errorf("gguf: tensor %q data: %w", t.Name, d.err)
		}
	}
	return f, nil
}

type decoder struct {
	r   *bufio.Reader
	n   uint64
	err error
	buf [8]byte
}

func (d *decoder) read(b []byte) {
	if d.err != nil {
		return
	}
	n, err := io.ReadFull(d.r, b)
	d.n += uint64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	d.err = err
}

func (d *decoder) skip(n uint64) {
	if d.err != nil || n == 0 {
		return
	}
	m, err := d.r.Discard(int(n))
	d.n += uint64(m)
	if err != nil {
		d.err = io.ErrUnexpectedEOF
	}
}

func (d *decoder) u8() uint8 { d.read(d.buf[:1]); return d.buf[0] }
func (d *decoder) u16() uint16 {
	d.read(d.buf[:2])
	return binary.LittleEndian.Uint16(d.buf[:2])
}
func (d *decoder) u32() uint32 {
	d.read(d.buf[:4])
	return binary.LittleEndian.Uint32(d.buf[:4])
}
func (d *decoder) u64() uint64 {
	d.read(d.buf[:8])
	return binary.LittleEndian.Uint64(d.buf[:8])
}

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > maxStringLen {
		d.err = fmt.Errorf("string of %d bytes, over this reader's limit", n)
		return ""
	}
	b := make([]byte, n)
	d.read(b)
	return string(b)
}

func (d *decoder) value(t ValueType) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		return d.u8() != 0
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		return d.array()
	}
	if d.err == nil {
		d.err = fmt.Errorf("unknown value type %d", t)
	}
	return nil
}

func (d *decoder) array() any {
	elem := ValueType(d.u32())
	n := d.u64()
	if d.err != nil {
		return nil
	}
	if n > maxArrayLen {
		d.err = fmt.Errorf("array of %d elements, over this reader's limit", n)
		return nil
	}
	switch elem {
	case TypeUint8:
		return readArray(d, n, d.u8)
	case TypeInt8:
		return readArray(d, n, func() int8 { return int8(d.u8()) })
	case TypeUint16:
		return readArray(d, n, d.u16)
	case TypeInt16:
		return readArray(d, n, func() int16 { return int16(d.u16()) })
	case TypeUint32:
		return readArray(d, n, d.u32)
	case TypeInt32:
		return readArray(d, n, func() int32 { return int32(d.u32()) })
	case TypeFloat32:
		return readArray(d, n, func() float32 { return math.Float32frombits(d.u32()) })
	case TypeBool:
		return readArray(d, n, func() bool { return d.u8() != 0 })
	case TypeString:
		return readArray(d, n, d.str)
	case TypeUint64:
		return readArray(d, n, d.u64)
	case TypeInt64:
		return readArray(d, n, func() int64 { return int64(d.u64()) })
	case TypeFloat64:
		return readArray(d, n, func() float64 { return math.Float64frombits(d.u64()) })
	}
	d.err = fmt.Errorf("unsupported array element type %d", elem)
	return nil
}

func readArray[T any](d *decoder, n uint64, next func() T) []T {
	out := make([]T, 0, min(n, 4096))
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, next())
	}
	return out
}

// Tensor returns the tensor named name.
func (f *File) Tensor(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}
