package controller

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/placement"
)

// TestRunAgainAfterATerm: a replica that lost the lead stands by and may
// lead again (cmd/pulselb's lead): Run ends a term, the replica is a
// standby again, and a second Run reconciles, from queues of its own,
// what changed meanwhile. Before, a term's end shut the queues down for
// good, and the process exited.
func TestRunAgainAfterATerm(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	svc := newService("web")
	f := newFixture(t, svc, newNode("n1", "10.0.0.1"), newNode("n2", "10.0.0.2"))
	c := f.controller(ctx)
	f.cluster.Start(ctx.Done())
	f.system.Start(ctx.Done())
	name := placement.Name(svc.Namespace, svc.Name)
	deployments := f.client.AppsV1().Deployments(systemNS)
	term := func(what string, done func() bool) {
		t.Helper()
		termCtx, end := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- c.Run(termCtx, 2) }()
		deadline := time.Now().Add(10 * time.Second)
		for !done() {
			if time.Now().After(deadline) {
				end()
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if c.standby.Load() {
			t.Errorf("%s: standby while leading", what)
		}
		end()
		select {
		case err := <-ran:
			if err != nil {
				t.Fatalf("%s: Run: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Run did not return after its term ended", what)
		}
		if !c.standby.Load() {
			t.Errorf("%s: not standing by after the term", what)
		}
	}
	exists := func() bool {
		_, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}
	term("the first term creates the proxy Deployment", exists)

	// Removed while no term runs (by hand, or by a leader elsewhere).
	if err := deployments.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	term("the second term creates it again", exists)
}
