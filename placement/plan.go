package placement

import (
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// WorkloadObject is a proxy Deployment, DaemonSet or PodDisruptionBudget,
// as PlanWorkload reads and returns it.
type WorkloadObject interface {
	metav1.Object
	runtime.Object
}

// WorkloadVerb is what a WorkloadAction does to the cluster.
type WorkloadVerb string

// The verbs of a WorkloadAction.
const (
	WorkloadNone   WorkloadVerb = "none"
	WorkloadCreate WorkloadVerb = "create"
	WorkloadUpdate WorkloadVerb = "update"
	WorkloadDelete WorkloadVerb = "delete"
)

// Why PlanWorkload chose an action; a WorkloadAction's Reason is one of
// these, for logs and tests.
const (
	// PlanNotFound: create, as nothing of the desired kind holds the
	// desired name.
	PlanNotFound = "notFound"
	// PlanSpecChanged: update, as the spec hash differs.
	PlanSpecChanged = "specChanged"
	// PlanUpToDate: no write, as the spec hash is the desired one.
	PlanUpToDate = "upToDate"
	// PlanNameTaken: no write, as the desired name holds a workload that
	// is not labelled for this Service; someone else's is never
	// overwritten.
	PlanNameTaken = "nameTaken"
	// PlanModeChanged: delete a workload of the other kind, left by a
	// proxy-mode change.
	PlanModeChanged = "modeChanged"
	// PlanNameChanged: delete a workload of the desired kind under
	// another name.
	PlanNameChanged = "nameChanged"
	// PlanNotWanted: delete, as the Service has no workload: it cannot be
	// served, is gone, or is no longer pulselb's.
	PlanNotWanted = "notWanted"
	// PlanAwaitingOwner: no write yet, as a budget is created once the
	// Deployment it belongs to exists, so that it can be owned by it.
	PlanAwaitingOwner = "awaitingOwner"
	// PlanOwnerChanged: update a budget owned by another Deployment of the
	// same name (deleted and created again).
	PlanOwnerChanged = "ownerChanged"
)

// WorkloadAction is one step of a WorkloadPlan.
type WorkloadAction struct {
	Verb   WorkloadVerb
	Reason string
	// Object is what to create; what to update with (the desired object
	// carrying the current resourceVersion); what to delete (the current
	// object, whose UID is the delete's precondition, so that a workload
	// re-created since it was read is not deleted in its place); or, for
	// WorkloadNone, the current object left alone. A deleted or
	// left-alone object comes from the caller's cache and must not be
	// changed.
	Object WorkloadObject
	// Current is, for an update, the object it replaces, from the
	// caller's cache; nil for the other verbs.
	Current WorkloadObject
}

// Kind returns the Kind of a's object: Deployment, DaemonSet or
// PodDisruptionBudget.
func (a WorkloadAction) Kind() string { return kindOf(a.Object) }

// WorkloadPlan is what makes a Service's current proxy workload the desired
// one. The deletes come first: the workloads they remove hold the host
// ports that the pods of a created or updated one need.
type WorkloadPlan struct {
	Actions []WorkloadAction
}

// PlanWorkload compares want, the desired workload of the Service svc
// (Desired's result, or the zero Workload when svc should have none), with
// current: the Deployments and DaemonSets labelled for svc, and whatever
// of want's kind holds want's name (it may be listed twice). It is pure.
//
// The plan deletes every workload labelled for svc other than want (the
// other kind after a proxy-mode change, an old name, or all of them when
// none is wanted), and never one labelled for another Service or not
// labelled at all. Then, when a workload is wanted, it creates it, updates
// it when the spec hash differs, or leaves it alone: when it is up to date,
// or when its name is taken by a workload not labelled for svc. An update
// writes the desired object whole, keeping only the current
// resourceVersion, so that it fails rather than overwrite a change it has
// not seen. That includes the replica count: it is placement's to decide
// (capped at the eligible nodes), not another controller's.
func PlanWorkload(svc types.NamespacedName, want Workload, current []WorkloadObject) WorkloadPlan {
	var workloads, budgets []WorkloadObject
	for _, cur := range current {
		if _, ok := cur.(*policyv1.PodDisruptionBudget); ok {
			budgets = append(budgets, cur)
		} else {
			workloads = append(workloads, cur)
		}
	}
	desired := want.object()
	existing, deletes := sortOut(svc, desired, false, workloads)
	plan := WorkloadPlan{Actions: deletes}
	if desired != nil {
		plan.Actions = append(plan.Actions, planDesired(svc, desired, existing))
	}
	return planBudget(plan, svc, want, existing, budgets)
}

// sortOut finds, among current, the object holding desired's kind and name
// (nil: none), and the deletes of every other object labelled for svc:
// modeChanged when it is of another kind than desired, or when desired is
// nil while the Service has a workload (othersWanted); nameChanged when it
// is of desired's kind; notWanted when the Service has nothing.
func sortOut(svc types.NamespacedName, desired WorkloadObject, othersWanted bool, current []WorkloadObject) (WorkloadObject, []WorkloadAction) {
	var existing WorkloadObject
	var deletes []WorkloadAction
	for _, cur := range current {
		if desired != nil && kindOf(cur) == kindOf(desired) && cur.GetName() == desired.GetName() {
			existing = cur
			continue
		}
		if !labelledFor(cur, svc) {
			continue
		}
		reason := PlanNotWanted
		switch {
		case desired == nil && othersWanted, desired != nil && kindOf(cur) != kindOf(desired):
			reason = PlanModeChanged
		case desired != nil:
			reason = PlanNameChanged
		}
		deletes = append(deletes, WorkloadAction{Verb: WorkloadDelete, Reason: reason, Object: cur})
	}
	return existing, deletes
}

// planBudget adds to plan what makes the budgets of svc want.Budget: it is
// created once its Deployment exists, owned by it, and updated when its
// spec hash or owner differs; every other budget labelled for svc goes.
func planBudget(plan WorkloadPlan, svc types.NamespacedName, want Workload, owner WorkloadObject, current []WorkloadObject) WorkloadPlan {
	var desired WorkloadObject // an untyped nil without a budget
	if want.Budget != nil {
		desired = want.Budget
	}
	existing, deletes := sortOut(svc, desired, want.object() != nil, current)
	plan.Actions = append(plan.Actions, deletes...)
	if want.Budget == nil {
		return plan
	}
	if _, ok := owner.(*appsv1.Deployment); !ok || !labelledFor(owner, svc) {
		plan.Actions = append(plan.Actions, WorkloadAction{Verb: WorkloadNone, Reason: PlanAwaitingOwner, Object: want.Budget})
		return plan
	}
	owned := want.Budget.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment",
		Name: owner.GetName(), UID: owner.GetUID(), BlockOwnerDeletion: ptr.To(true)}}
	a := planDesired(svc, owned, existing)
	if a.Verb == WorkloadNone && a.Reason == PlanUpToDate && !ownedBy(existing, owner) {
		next := owned.DeepCopy()
		next.SetResourceVersion(existing.GetResourceVersion())
		a = WorkloadAction{Verb: WorkloadUpdate, Reason: PlanOwnerChanged, Object: next, Current: existing}
	}
	plan.Actions = append(plan.Actions, a)
	return plan
}

// ownedBy reports whether o's owner references name owner by UID.
func ownedBy(o, owner WorkloadObject) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// planDesired returns the action that makes existing (nil: none) desired.
func planDesired(svc types.NamespacedName, desired, existing WorkloadObject) WorkloadAction {
	switch {
	case existing == nil:
		return WorkloadAction{Verb: WorkloadCreate, Reason: PlanNotFound, Object: desired}
	case !labelledFor(existing, svc):
		return WorkloadAction{Verb: WorkloadNone, Reason: PlanNameTaken, Object: existing}
	case existing.GetAnnotations()[contract.AnnotationSpecHash] == desired.GetAnnotations()[contract.AnnotationSpecHash]:
		return WorkloadAction{Verb: WorkloadNone, Reason: PlanUpToDate, Object: existing}
	}
	next := desired.DeepCopyObject().(WorkloadObject)
	next.SetResourceVersion(existing.GetResourceVersion())
	return WorkloadAction{Verb: WorkloadUpdate, Reason: PlanSpecChanged, Object: next, Current: existing}
}

// object returns w's Deployment or DaemonSet, or nil when it has neither.
// An untyped nil, so that callers can compare it with nil.
func (w Workload) object() WorkloadObject {
	switch {
	case w.Deployment != nil:
		return w.Deployment
	case w.DaemonSet != nil:
		return w.DaemonSet
	}
	return nil
}

func labelledFor(o WorkloadObject, svc types.NamespacedName) bool {
	key, ok := contract.ServiceOf(o.GetLabels())
	return ok && key == svc
}

// kindOf names o's kind from its Go type: objects from an informer's cache
// carry no TypeMeta.
func kindOf(o WorkloadObject) string {
	switch o.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	}
	return ""
}
