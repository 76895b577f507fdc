package contract

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
)

// DefaultVantages is how many prober nodes probe each target.
const DefaultVantages = 3

// Vantage is a prober node that may be assigned targets: a node with a
// Ready prober pod that is itself Ready.
type Vantage struct {
	Node string
	// Zone is the node's topology.kubernetes.io/zone label; "" when unset.
	Zone string
}

// Vantages returns the k prober nodes that probe the target key on
// targetNode, best first: rendezvous hashing, the k highest
// sha256(proberNode + "#" + key) among candidates, never targetNode itself,
// and nodes in a zone other than targetZone before nodes in the same zone
// (when targetZone is known). Every prober and the controller compute the
// same answer from the same candidates without talking to each other, and
// a candidate leaving changes only the targets it was a vantage of.
// Candidates may be in any order; duplicates count once.
func Vantages(key, targetNode, targetZone string, candidates []Vantage, k int) []string {
	if k <= 0 {
		return nil
	}
	type scored struct {
		node  string
		other bool
		score uint64
	}
	top := make([]scored, 0, k+1)
	better := func(a, b scored) bool {
		if a.other != b.other {
			return a.other
		}
		if a.score != b.score {
			return a.score > b.score
		}
		return a.node < b.node
	}
	for _, c := range candidates {
		if c.Node == targetNode || c.Node == "" {
			continue
		}
		s := scored{node: c.Node, other: targetZone == "" || c.Zone != targetZone, score: score(c.Node, key)}
		if len(top) == k && !better(s, top[k-1]) {
			continue
		}
		if slices.ContainsFunc(top, func(t scored) bool { return t.node == s.node }) {
			continue
		}
		i := len(top)
		for i > 0 && better(s, top[i-1]) {
			i--
		}
		top = slices.Insert(top, i, s)
		if len(top) > k {
			top = top[:k]
		}
	}
	out := make([]string, len(top))
	for i, t := range top {
		out[i] = t.node
	}
	return out
}

// score is the rendezvous weight of node for key.
func score(node, key string) uint64 {
	var b strings.Builder
	b.Grow(len(node) + 1 + len(key))
	b.WriteString(node)
	b.WriteByte('#')
	b.WriteString(key)
	sum := sha256.Sum256([]byte(b.String()))
	return binary.BigEndian.Uint64(sum[:8])
}

// maxMemoEntries bounds a VantageMemo: past it, the memo starts over.
const maxMemoEntries = 1 << 18

// VantageMemo remembers the answers of Vantages for one set of candidates
// and one k, so that a caller that assigns the same targets again (each
// time the cluster changes) hashes only the targets it has not seen, and
// callers that share one memo (several agents in one process) hash each
// target once between them. Its answers are always those of Vantages: a
// different candidate set or k starts it over. Safe for concurrent use;
// the zero value is ready.
type VantageMemo struct {
	mu    sync.Mutex
	cands []Vantage // sorted by node, duplicates removed
	k     int
	table map[vantageQuery][]string
}

type vantageQuery struct{ key, node, zone string }

// For returns a function answering Vantages(key, targetNode, targetZone,
// candidates, k). The answers it returns are shared: callers must not
// change them.
func (m *VantageMemo) For(candidates []Vantage, k int) func(key, targetNode, targetZone string) []string {
	set := slices.Clone(candidates)
	slices.SortFunc(set, func(a, b Vantage) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.Zone, b.Zone)
	})
	set = slices.Compact(set)
	for i := 1; i < len(set); i++ {
		if set[i].Node == set[i-1].Node {
			// A node listed in two zones: which zone counts depends on
			// the order, which the memo does not keep.
			return func(key, targetNode, targetZone string) []string {
				return Vantages(key, targetNode, targetZone, candidates, k)
			}
		}
	}
	m.mu.Lock()
	if m.table == nil || k != m.k || !slices.Equal(set, m.cands) {
		m.cands, m.k, m.table = set, k, map[vantageQuery][]string{}
	}
	cands, table := m.cands, m.table
	m.mu.Unlock()
	return func(key, targetNode, targetZone string) []string {
		q := vantageQuery{key: key, node: targetNode, zone: targetZone}
		m.mu.Lock()
		v, ok := table[q]
		m.mu.Unlock()
		if ok {
			return v
		}
		v = Vantages(key, targetNode, targetZone, cands, k)
		m.mu.Lock()
		if len(table) >= maxMemoEntries {
			clear(table)
		}
		table[q] = v
		m.mu.Unlock()
		return v
	}
}
