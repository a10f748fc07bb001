package cpu

// Attention's inner loops over one position for a chunk of heads: one call
// per position instead of one per head, since at decode a head's work is
// only HeadDim multiply-adds and per-call overhead dominated it. Query head
// h reads kv head h/group, so with grouped-query attention consecutive
// heads share one K (or V) segment.
var (
	// dotsF32 sets out[h] = Σ_{i<hd} q[h·hd+i]·k[(h/group)·hd+i] for h <
	// len(out).
	dotsF32 func(q, k []float32, hd, group int, out []float32)
	// axpysF32 does y[h·hd+i] += w[h]·v[(h/group)·hd+i] for h < len(w).
	axpysF32 func(y, w, v []float32, hd, group int)
)

func dotsF32Go(q, k []float32, hd, group int, out []float32) {
	for h := range out {
		kh := k[(h/group)*hd : (h/group+1)*hd]
		qh := q[h*hd : (h+1)*hd]
		var s float32
		for i, x := range qh {
			s += x * kh[i]
		}
		out[h] = s
	}
}

func axpysF32Go(y, w, v []float32, hd, group int) {
	for h, a := range w {
		vh := v[(h/group)*hd : (h/group+1)*hd]
		yh := y[h*hd : (h+1)*hd]
		for i, x := range vh {
			yh[i] += a * x
		}
	}
}

// The F16 cache's loops go further: a call covers a run of positions (a
// block's consecutive slots, stride elements apart) as well as the chunk of
// heads, so the assembly loads a head's query (or output) once for four
// positions and reduces four positions' dot products together. k and v hold
// IEEE half bits, widened to float32 as they are read.
var (
	// dotsF16 sets out[p·nh+h] = Σ_{i<hd} q[h·hd+i]·k[p·stride+(h/group)·hd+i]
	// for h < nh = len(q)/hd and p < len(out)/nh.
	dotsF16 = dotsF16Go
	// axpysF16 does y[h·hd+i] += Σ_p w[p·nh+h]·v[p·stride+(h/group)·hd+i]
	// for h < nh = len(y)/hd and p < len(w)/nh, adding in order of p (so
	// the result is the same however positions are split into calls).
	axpysF16 = axpysF16Go
)

func dotsF16Go(q []float32, k []uint16, hd, group, stride int, out []float32) {
	nh := len(q) / hd
	if nh == 0 {
		return
	}
	for p := range len(out) / nh {
		for h := range nh {
			kh := k[p*stride+(h/group)*hd : p*stride+(h/group+1)*hd]
			qh := q[h*hd : (h+1)*hd]
			var s float32
			for i, x := range qh {
				s += x * f16Table[kh[i]]
			}
			out[p*nh+h] = s
		}
	}
}

func axpysF16Go(y, w []float32, v []uint16, hd, group, stride int) {
	nh := len(y) / hd
	if nh == 0 {
		return
	}
	for p := range len(w) / nh {
		for h := range nh {
			a := w[p*nh+h]
			vh := v[p*stride+(h/group)*hd : p*stride+(h/group+1)*hd]
			yh := y[h*hd : (h+1)*hd]
			for i, x := range vh {
				yh[i] += a * f16Table[x]
			}
		}
	}
}

// groupedG2 reports whether the grouped kernels (spreadG2, dotsG2,
// axpysG2) are in use: they give the assembly kernels' bits, not the Go
// kernels', so they run only beside those.
var groupedG2 bool

// useAttnGo points the attention kernels of the F16 cache (head loops and
// conversion) and the softmax passes at their Go versions; useAsm calls it
// before setAsm picks the assembly ones.
func useAttnGo() {
	groupedG2 = false
	dotsF16, axpysF16 = dotsF16Go, axpysF16Go
	f32ToF16Row = f32ToF16RowGo
	colMax, expSub = colMaxGo, expSubGo
	ropeHalves, ropePairs = ropeHalvesGo, ropePairsGo
}
