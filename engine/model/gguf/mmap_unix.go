//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"io"
	"os"
	"syscall"
)

// mapFile maps size bytes of fh read-only. An empty file cannot be mapped,
// so it reads as an empty slice (which Parse then rejects).
func mapFile(fh *os.File, size int) ([]byte, func() error, error) {
	if size == 0 {
		return nil, nil, nil
	}
	data, err := syscall.Mmap(int(fh.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		// Some file systems cannot map; reading keeps Open working there.
		return readAll(fh, size)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}

func readAll(fh *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}
