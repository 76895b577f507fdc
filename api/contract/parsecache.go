package contract

import (
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// ParseCache remembers what Parse returned for each Service while what
// Parse reads of it, its annotations (but those pulselb writes) and ports,
// stays the same. A consumer
// that reads every Service again whenever any one changes (the DNS feed,
// the dashboard, the prober agent) then parses a Service once per change
// of its own rather than once per pass; a parse compiles the probes'
// regular expressions. The key is not the resourceVersion: pulselb's own
// status writes change it and leave the settings as they were.
//
// Answers are shared between callers, who must not change them (their
// slices are clipped, so an append copies). Prune, called after each pass
// over all Services, forgets the Services the pass did not parse. Safe for
// concurrent use; the zero value is ready.
type ParseCache struct {
	mu      sync.Mutex
	round   uint64
	entries map[types.NamespacedName]*parsedService
}

// parsedService is Parse's answer for one Service and what it was read
// from.
type parsedService struct {
	annotations map[string]string
	ports       []corev1.ServicePort
	settings    Settings
	problems    []Problem
	round       uint64
}

// Parse returns Parse(svc), parsing only when svc's annotations or ports
// differ from those of the last call for the same Service.
func (c *ParseCache) Parse(svc *corev1.Service) (Settings, []Problem) {
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil || !SettingAnnotationsEqual(e.annotations, svc.Annotations) || !equality.Semantic.DeepEqual(e.ports, svc.Spec.Ports) {
		s, problems := Parse(svc)
		s.NodeSelector, s.Probes, s.Hostnames = slices.Clip(s.NodeSelector), slices.Clip(s.Probes), slices.Clip(s.Hostnames)
		ports := make([]corev1.ServicePort, len(svc.Spec.Ports))
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].DeepCopyInto(&ports[i])
		}
		e = &parsedService{annotations: maps.Clone(svc.Annotations), ports: ports, settings: s, problems: slices.Clip(problems)}
		if c.entries == nil {
			c.entries = map[types.NamespacedName]*parsedService{}
		}
		c.entries[key] = e
	}
	e.round = c.round
	return e.settings, e.problems
}

// Prune forgets every Service not parsed since the last Prune: those that
// are gone, or that the pass no longer reads.
func (c *ParseCache) Prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.entries, func(_ types.NamespacedName, e *parsedService) bool { return e.round != c.round })
	c.round++
}

// Len returns how many Services c remembers.
func (c *ParseCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
