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
