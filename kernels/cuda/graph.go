//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
)

// Graph is a captured sequence of ops (a decode step) that replays as one
// CUDA graph launch, without the per-kernel launch cost.
//
// A graph bakes in every kernel's grid and parameters (tensor addresses,
// sizes) and reads its small host arguments (token ids, positions, block
// tables) from the backend's argument arena at fixed offsets. Replay
// therefore reruns the same op sequence in an arguments-only mode that
// refreshes the arena without launching anything, checks that every launch
// matches the captured one, and then launches the graph. A step whose
// shapes or tensors changed (another batch size, a grown table) does not
// match: Replay returns ErrGraphMismatch and the caller captures again.
//
// Capture only a step that allocates nothing new: run it once uncaptured
// first, so scratch buffers have their final size, and keep the tensors it
// uses alive while the graph exists. Download, and CopyBlocks with a host
// cache, cannot be captured; the step function must end before the logits
// are downloaded.
type Graph struct {
	b     *Backend
	exec  *graphExec
	trace uint64
	used  int
}

// ErrGraphMismatch is returned by Replay when the step's launches differ
// from the captured ones.
var ErrGraphMismatch = errors.New("cuda: step differs from the captured graph")

// Capture runs step with every op captured into a graph instead of run.
func (b *Backend) Capture(step func()) (g *Graph, err error) {
	if b.mode != modeRun {
		return nil, errors.New("cuda: Capture inside a capture or replay")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer b.enter()()
	b.sync()
	b.used = 0
	b.trace.SetSeed(b.seed)
	b.trace.Reset()
	if err := beginCapture(b.stream); err != nil {
		return nil, err
	}
	b.mode = modeCapture
	defer func() {
		if r := recover(); r != nil {
			b.mode = modeRun
			if ex, err := endCapture(b.stream); err == nil {
				ex.destroy()
			}
			err = fmt.Errorf("cuda: capture: %v", r)
		}
	}()
	step()
	b.mode = modeRun
	ex, err := endCapture(b.stream)
	if err != nil {
		return nil, err
	}
	return &Graph{b: b, exec: ex, trace: b.trace.Sum64(), used: b.used}, nil
}

// Replay reruns step in arguments-only mode and, when it matches the
// capture, launches the graph. It returns before the device has run it;
// the next Download waits for it.
func (g *Graph) Replay(step func()) (err error) {
	b := g.b
	if g.exec == nil {
		return errors.New("cuda: Replay of a closed graph")
	}
	if b.mode != modeRun {
		return errors.New("cuda: Replay inside a capture or replay")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer b.enter()()
	// The arena is rewritten below: earlier ops must have read it.
	b.sync()
	b.used = 0
	b.trace.SetSeed(b.seed)
	b.trace.Reset()
	b.mode = modeArgs
	defer func() {
		b.mode = modeRun
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda: replay: %v", r)
		}
	}()
	step()
	b.mode = modeRun
	if b.trace.Sum64() != g.trace || b.used != g.used {
		b.used = 0
		return ErrGraphMismatch
	}
	// Keep later ops from staging over the arguments the graph has yet to
	// read; the next sync rewinds.
	b.used = g.used
	return g.exec.launch(b.stream)
}

// Close releases the graph.
func (g *Graph) Close() {
	if g.exec == nil {
		return
	}
	defer g.b.enter()()
	must(g.b.stream.Synchronize())
	g.exec.destroy()
	g.exec = nil
}

// note adds a launch to the trace while capturing or replaying.
func (b *Backend) note(k kernel, gx, gy, gz, block int, args []uint64) {
	if b.mode == modeRun {
		return
	}
	var buf [8]byte
	for _, v := range [...]int{int(k), gx, gy, gz, block, len(args)} {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		b.trace.Write(buf[:])
	}
	for _, v := range args {
		binary.LittleEndian.PutUint64(buf[:], v)
		b.trace.Write(buf[:])
	}
}
