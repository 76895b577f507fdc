package v1alpha1

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

func TestClientRoundTripAndInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The fake tracker must not know the typed kinds: the dynamic client
	// stores unstructured objects, as the real API server's does JSON.
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{Resource: "ProbeReportList"})
	c := NewClient(d)
	hb := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	in := &ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: "n1"},
		Status: ProbeReportStatus{HeartbeatTime: hb, Results: []ProbeResult{{Service: "shop/web", Port: 80, PortProtocol: "TCP",
			Protocol: "http", Observation: Observation{Node: "n2", Address: "10.0.0.2:80", State: StateDown, Message: "HTTP 503"}}}}}
	if _, err := c.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "pulselb-system", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Results[0].State != StateDown || got.Status.Results[0].Node != "n2" || !got.Status.HeartbeatTime.Equal(&hb) {
		t.Fatalf("round trip: got %+v", got.Status)
	}

	inf := NewInformer(c, "pulselb-system")
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	obj, ok, err := inf.GetIndexer().GetByKey("pulselb-system/n1")
	if err != nil || !ok {
		t.Fatalf("informer cache: ok=%v err=%v", ok, err)
	}
	if _, typed := obj.(*ProbeReport); !typed {
		t.Fatalf("informer holds %T, want *ProbeReport", obj)
	}
}

func TestAddToScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvks, _, err := scheme.ObjectKinds(&ProbeReport{})
	if err != nil || len(gvks) != 1 || gvks[0] != SchemeGroupVersion.WithKind("ProbeReport") {
		t.Fatalf("ObjectKinds = %v, %v", gvks, err)
	}
}
