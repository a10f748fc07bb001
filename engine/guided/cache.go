package guided

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"
)

// Cache holds compiled grammars, keyed by a hash of the Spec and the
// Vocab's ID, and evicts the least recently used past its bound. Requests
// asking for the same grammar at once share one compilation. Compile
// errors are cached like grammars: compiling is deterministic, and a
// refused spec (one past the DFA state limit can take a second to refuse)
// is often retried as it was. Safe for concurrent use.
type Cache struct {
	max int

	mu    sync.Mutex // protects the fields below
	lru   *list.List // of *cacheEntry, most recent first
	items map[[32]byte]*list.Element
}

type cacheEntry struct {
	key   [32]byte
	ready chan struct{} // closed when g and err are set
	g     *Grammar
	err   error
}

// NewCache returns a cache holding at most max grammars (max ≤ 0 means 64).
func NewCache(max int) *Cache {
	if max <= 0 {
		max = 64
	}
	return &Cache{max: max, lru: list.New(), items: map[[32]byte]*list.Element{}}
}

// Get returns the grammar for spec over vocab, compiling it on a miss.
func (c *Cache) Get(spec Spec, vocab *Vocab) (*Grammar, error) {
	if vocab == nil {
		return Compile(spec, vocab)
	}
	key := specKey(spec, vocab)
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.ready
		return e.g, e.err
	}
	e := &cacheEntry{key: key, ready: make(chan struct{})}
	c.items[key] = c.lru.PushFront(e)
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.items, old.Value.(*cacheEntry).key)
	}
	c.mu.Unlock()

	e.g, e.err = Compile(spec, vocab)
	close(e.ready)
	return e.g, e.err
}

// Len returns the number of cached grammars (including ones compiling).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// specKey hashes everything Compile reads: the kind and content of the
// constraint (a schema with its insignificant whitespace removed), the
// limits, and the vocabulary's identity.
func specKey(spec Spec, v *Vocab) [32]byte {
	h := sha256.New()
	field := func(tag byte, data []byte) {
		var n [9]byte
		n[0] = tag
		binary.LittleEndian.PutUint64(n[1:], uint64(len(data)))
		h.Write(n[:])
		h.Write(data)
	}
	field('v', []byte(v.ID()))
	field('r', []byte(spec.Regex))
	schema := spec.Schema
	var buf bytes.Buffer
	if json.Compact(&buf, schema) == nil {
		schema = buf.Bytes()
	}
	field('s', schema)
	for _, ch := range spec.Choices {
		field('c', []byte(ch))
	}
	if spec.JSON {
		field('j', nil)
	}
	if c := spec.Calls; c != nil {
		opt := byte(0)
		if c.Optional {
			opt = 1
		}
		field('o', []byte(c.Open))
		field('c', []byte(c.Close))
		field('m', []byte{byte(c.Max), byte(c.Max >> 8), opt})
	}
	l := spec.Limits.withDefaults()
	var lim [40]byte
	for i, x := range []int{l.MaxNFAStates, l.MaxDFAStates, l.MaxDepth, l.JSONDepth, l.RefDepth} {
		binary.LittleEndian.PutUint64(lim[8*i:], uint64(x))
	}
	field('l', lim[:])
	var key [32]byte
	h.Sum(key[:0])
	return key
}
