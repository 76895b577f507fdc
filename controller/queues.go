package controller

import (
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// termQueue is a work queue that outlives the leader's terms: a term's
// workers end when Run shuts the queue down, and renew gives the queue a
// fresh one for the next term (after a standby spell, see Run). Whoever
// adds while it is renewed may add to the old queue, whose items are
// dropped; the next term enqueues every Service and node again.
type termQueue[T comparable] struct {
	cur  atomic.Pointer[workqueue.TypedRateLimitingInterface[T]]
	make func() workqueue.TypedRateLimitingInterface[T]
}

var _ workqueue.TypedRateLimitingInterface[string] = (*termQueue[string])(nil)

func newTermQueue[T comparable](name string, m *Metrics) *termQueue[T] {
	q := &termQueue[T]{make: func() workqueue.TypedRateLimitingInterface[T] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[T](),
			workqueue.TypedRateLimitingQueueConfig[T]{Name: name, MetricsProvider: queueMetrics{m}})
	}}
	q.renew()
	return q
}

func (q *termQueue[T]) q() workqueue.TypedRateLimitingInterface[T] { return *q.cur.Load() }

// renew drains the current queue, which must be shut down and have no
// worker left (so that its depth metric returns to zero), and puts a
// fresh one in its place.
func (q *termQueue[T]) renew() {
	if old := q.cur.Load(); old != nil {
		for (*old).Len() > 0 {
			k, _ := (*old).Get()
			(*old).Done(k)
			(*old).Forget(k)
		}
	}
	next := q.make()
	q.cur.Store(&next)
}

func (q *termQueue[T]) Add(item T)                       { q.q().Add(item) }
func (q *termQueue[T]) Len() int                         { return q.q().Len() }
func (q *termQueue[T]) Get() (T, bool)                   { return q.q().Get() }
func (q *termQueue[T]) Done(item T)                      { q.q().Done(item) }
func (q *termQueue[T]) ShutDown()                        { q.q().ShutDown() }
func (q *termQueue[T]) ShutDownWithDrain()               { q.q().ShutDownWithDrain() }
func (q *termQueue[T]) ShuttingDown() bool               { return q.q().ShuttingDown() }
func (q *termQueue[T]) AddAfter(item T, d time.Duration) { q.q().AddAfter(item, d) }
func (q *termQueue[T]) AddRateLimited(item T)            { q.q().AddRateLimited(item) }
func (q *termQueue[T]) Forget(item T)                    { q.q().Forget(item) }
func (q *termQueue[T]) NumRequeues(item T) int           { return q.q().NumRequeues(item) }
