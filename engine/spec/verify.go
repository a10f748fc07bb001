package spec

import (
	"math/rand/v2"
)

// Root names the tree's root (the last committed token) where a node index
// is expected.
const Root int32 = -1

// VerifyGreedy walks t from the root along the target's choices: target[0]
// is the target's token after the root, target[1+i] its token after node i
// (the argmax of its processed logits). At each node the child holding the
// target's token is accepted (the first such sibling when a drafter
// repeated one); the walk ends at a node without one. It returns the
// accepted nodes, root to leaf, and the target's token after the last of
// them (the bonus token every step yields). len(target) must be t.Len()+1.
//
// Because every accepted token is the target's own argmax after exactly the
// tokens before it, greedy speculative output equals plain greedy output.
//
// The same walk verifies sampled requests when target holds the target's
// seeded draws, each with the request's uniform for its position
// (sample.Sampler keys draws by (seed, position)): the token plain
// sampling emits at position i after history h is a fixed function
// x(h, u_i); by induction over the path, every accepted token and the
// bonus equal x at their positions after the same history, so the output
// is exactly plain sampling's, which has the target's distribution, and a
// seed reproduces it with speculation on or off. A drafter that draws with
// the same uniforms from a distribution close to the target's is accepted
// often (TestVerifyCoupledDistribution).
func VerifyGreedy(t *Tree, target []int32) (path []int32, bonus int32) {
	return VerifyWalk(t, func(node int32) int32 { return target[node+1] })
}

// VerifyWalk is VerifyGreedy with the target's token after a node asked
// for as the walk reaches it, so that nodes off the accepted path are
// never evaluated.
func VerifyWalk(t *Tree, after func(node int32) int32) (path []int32, bonus int32) {
	cur := Root
	for {
		want := after(cur)
		next := Root
		for i := cur + 1; int(i) < len(t.Tokens); i++ {
			if t.Parent[i] == cur && t.Tokens[i] == want {
				next = i
				break
			}
		}
		if next == Root {
			return path, want
		}
		path = append(path, next)
		cur = next
	}
}

// Uniform is the random source VerifySampled draws from: a float in [0, 1).
// *rand.Rand satisfies it.
type Uniform interface{ Float64() float64 }

var _ Uniform = (*rand.Rand)(nil)

// VerifySampled walks t with multi-round speculative sampling (recursive
// rejection sampling over siblings, as in SpecInfer and EAGLE), so that the
// tokens it returns have exactly the target's distribution whatever the
// drafter proposed.
//
// probs(node) returns the target's processed next-token distribution after
// node (Root for the root): the request's penalties, top-k, top-p, min-p,
// temperature and guided mask already applied, as sample.Sampler.Probs
// gives it. The verifier modifies the returned slice (it becomes the
// residual), so probs must return memory the caller no longer needs.
//
// At node u with target distribution p, the children x₁, x₂, … of u are
// tried in order; child xⱼ, drawn by the drafter from qⱼ = t.Q[xⱼ] (a point
// mass on its token when nil), is accepted with probability
// min(1, p(xⱼ)/qⱼ(xⱼ)). On rejection p becomes the normalised residual
// max(p − qⱼ, 0) and the next child is tried; when every child is rejected
// the next token is drawn from the residual and the walk ends. An accepted
// child becomes u and the walk goes on. This is lossless provided each
// child's token was in fact drawn from its qⱼ (a deterministic choice is a
// draw from a point mass; qⱼ may depend on the earlier siblings).
//
// It returns the accepted nodes, root to leaf, and the next token drawn
// from the target after them.
func VerifySampled(t *Tree, probs func(node int32) []float32, rng Uniform) (path []int32, next int32) {
	return verifySampled(t, probs, rng, residual)
}

// rejectRule updates p after child tok, drawn from q (nil: point mass), was
// rejected. Tests swap in a known-bad rule to show that the chi-square test
// catches it.
type rejectRule func(p, q []float32, tok int32)

// residual sets p to the normalised max(p − q, 0). When rounding left no
// mass (p ≤ q everywhere, which exact arithmetic only allows when the
// child would have been accepted for sure) p is left as it was.
func residual(p, q []float32, tok int32) {
	var z float64
	if q == nil {
		z = 1 - float64(p[tok])
		if z <= 0 {
			return
		}
		p[tok] = 0
	} else {
		z = 0
		for i, v := range p {
			if i < len(q) {
				v -= q[i]
			}
			if v > 0 {
				z += float64(v)
			}
		}
		if z <= 0 {
			return
		}
		for i, v := range p {
			if i < len(q) {
				v -= q[i]
			}
			p[i] = max(v, 0)
		}
	}
	inv := 1 / z
	for i, v := range p {
		p[i] = float32(float64(v) * inv)
	}
}

func verifySampled(t *Tree, probs func(node int32) []float32, rng Uniform, reject rejectRule) (path []int32, next int32) {
	cur := Root
	for {
		p := probs(cur)
		accepted := Root
		for i := cur + 1; int(i) < len(t.Tokens); i++ {
			if t.Parent[i] != cur {
				continue
			}
			tok, q := t.Tokens[i], t.Q[i]
			if tok < 0 || int(tok) >= len(p) {
				continue // not a token of this vocabulary: never accepted
			}
			px := float64(p[tok])
			qx := 1.0
			if q != nil {
				qx = 0
				if int(tok) < len(q) {
					qx = float64(q[tok])
				}
			}
			u := rng.Float64()
			if px > 0 && (qx <= 0 || u*qx < px) {
				accepted = i
				break
			}
			reject(p, q, tok)
		}
		if accepted == Root {
			return path, draw(p, rng.Float64())
		}
		path = append(path, accepted)
		cur = accepted
	}
}

// draw returns the index u (in [0, 1)) selects from the weights p, which
// need not sum to one; 0 when all are zero.
func draw(p []float32, u float64) int32 {
	var total float64
	last := -1
	for i, v := range p {
		if v > 0 {
			total += float64(v)
			last = i
		}
	}
	if last < 0 {
		return 0
	}
	target := u * total
	var cum float64
	for i, v := range p {
		if v > 0 {
			cum += float64(v)
			if cum > target {
				return int32(i)
			}
		}
	}
	return int32(last)
}
