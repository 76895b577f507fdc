package main

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// listAndWatch calls observe with each object list returns (as Modified,
// all at the time the list came back) and then with each event of a watch
// from the list's resourceVersion (at the time it came), until ctx is done.
// A failed list or watch is tried again a second later; a watch that ends
// starts over with a new list.
func listAndWatch[T any](ctx context.Context,
	list func(context.Context) ([]T, string, error),
	watchFrom func(ctx context.Context, resourceVersion string) (watch.Interface, error),
	observe func(t watch.EventType, obj T, at time.Time),
) {
	for ctx.Err() == nil {
		items, rv, err := list(ctx)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		now := time.Now()
		for _, obj := range items {
			observe(watch.Modified, obj, now)
		}
		wi, err := watchFrom(ctx, rv)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for e := range wi.ResultChan() {
			if obj, ok := e.Object.(T); ok {
				observe(e.Type, obj, time.Now())
			}
		}
		wi.Stop()
	}
}

// pointers returns pointers to each of items, in order.
func pointers[T any](items []T) []*T {
	ps := make([]*T, len(items))
	for i := range items {
		ps[i] = &items[i]
	}
	return ps
}
