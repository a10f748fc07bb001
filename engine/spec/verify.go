package spec

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
	return walk(t, after, true)
}

// walk follows the tree from the root: at each node it asks after for the
// target's token and moves to the first child drafting it, or, with verify
// false, to the first child whatever it drafts (the known-bad rule).
func walk(t *Tree, after func(node int32) int32, verify bool) (path []int32, bonus int32) {
	cur := Root
	for {
		want := after(cur)
		next := Root
		for i := cur + 1; int(i) < len(t.Tokens); i++ {
			if t.Parent[i] == cur && (!verify || t.Tokens[i] == want) {
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

// unverified, set only by tests, makes Step take drafts unverified (walk
// with verify false): the known-bad rule the lossless suites must catch.
// A flag, not a function variable: an indirect call would move the verify
// closures to the heap on every step.
var unverified bool
