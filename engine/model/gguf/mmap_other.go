//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gguf

import (
	"io"
	"os"
)

// mapFile reads the file into memory where there is no mmap.
func mapFile(fh *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}

// releasePages does nothing: the file was read into memory, which cannot
// be given back in parts.
func releasePages([]byte) error { return nil }
