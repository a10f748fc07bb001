//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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

// releasePages lets the whole pages inside b, part of a file mapping, go
// from the process: they are no longer counted as its memory, and reading
// them again maps them back from the file. The pages b shares with its
// neighbours are left alone.
func releasePages(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	ps := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(&b[0]))
	lo := (p + ps - 1) &^ (ps - 1)
	hi := (p + uintptr(len(b))) &^ (ps - 1)
	if hi <= lo {
		return nil
	}
	return unix.Madvise(b[lo-p:hi-p], unix.MADV_DONTNEED)
}
