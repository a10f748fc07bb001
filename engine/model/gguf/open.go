package gguf

import (
	"fmt"
	"os"
)

// Open maps the file at path read-only and parses it. Tensor data is not
// copied: Data returns views of the mapping, valid until Close. Where the
// platform has no mmap the file is read into memory instead.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	size := st.Size()
	if size < 0 || uint64(size) > uint64(maxInt) {
		return nil, fmt.Errorf("gguf: %s: %d bytes is too large to map: %w", path, size, ErrFormat)
	}
	data, unmap, err := mapFile(fh, int(size))
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	f.unmap = unmap
	return f, nil
}

const maxInt = int(^uint(0) >> 1)
