package prober

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
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
