package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

var (
	repoRoot = filepath.Join("..", "..")
	chartDir = filepath.Join(repoRoot, "deploy", "helm", "pulselb")
	baseDir  = filepath.Join(repoRoot, "deploy", "base")
)

// TestManifestsUpToDate fails when deploy/base or the chart's crds/ differ
// from a fresh render: run `make manifests`.
func TestManifestsUpToDate(t *testing.T) {
	crds, err := CRDFiles(filepath.Join(repoRoot, "deploy", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBase(filepath.Join(chartDir, "crds"), crds); err != nil {
		t.Error(err)
	}
	files, err := BaseFiles(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckBase(baseDir, files); err != nil {
		t.Error(err)
	}
}

// TestManifestsCheckFindsDrift makes sure the check above can fail.
func TestManifestsCheckFindsDrift(t *testing.T) {
	files, err := BaseFiles(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteBase(dir, files); err != nil {
		t.Fatal(err)
	}
	if err := CheckBase(dir, files); err != nil {
		t.Fatalf("fresh base: %v", err)
	}
	changed := map[string][]byte{}
	for k, v := range files {
		changed[k] = v
	}
	changed["controller.yaml"] = []byte(strings.Replace(string(files["controller.yaml"]), "replicas: 2", "replicas: 3", 1))
	delete(changed, "prober.yaml")
	changed["extra.yaml"] = []byte("x: 1\n")
	err = CheckBase(dir, changed)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("CheckBase = %v, want ErrStale", err)
	}
	for _, want := range []string{"controller.yaml differs at line", "extra.yaml is missing", "prober.yaml is not generated"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckBase error %q does not say %q", err, want)
		}
	}
}

// TestManifestsKustomizeBuild builds deploy/base as `kubectl apply -k`
// does and checks it holds exactly the chart's objects.
func TestManifestsKustomizeBuild(t *testing.T) {
	built, err := Build(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Render(chartDir, BaseValues())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*unstructured.Unstructured{}
	for _, d := range docs {
		want[objectKey(d.Object)] = d.Object
	}
	if len(built) != len(want) {
		t.Errorf("kustomize built %d objects, the chart renders %d", len(built), len(want))
	}
	for _, o := range built {
		w, ok := want[objectKey(o)]
		if !ok {
			t.Errorf("kustomize built %s, which the chart does not render", objectKey(o))
			continue
		}
		// Compared as JSON: kustomize decodes numbers as int64, Helm's
		// YAML decoder as float64.
		got, err1 := json.Marshal(o.Object)
		exp, err2 := json.Marshal(w.Object)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, exp) {
			t.Errorf("%s differs between kustomize and the chart:\nkustomize:\n%s\nchart:\n%s", objectKey(o), marshal(o.Object), marshal(w.Object))
		}
	}
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + " " + o.GetNamespace() + "/" + o.GetName()
}

// valueSets are the chart configurations the tests render and validate.
var valueSets = []struct {
	name   string
	values map[string]any
}{
	{"defaults", nil},
	{"base", BaseValues()},
	{"serviceMonitor", map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}}},
	{"dnsendpoints-no-dns-class-only", map[string]any{
		"dnsendpoints": true, "classOnly": true,
		"dns": map[string]any{"zone": ""},
	}},
	{"no-probe-reports", map[string]any{"probeReports": false, "metrics": map[string]any{"service": false}}},
	{"external-vantages", map[string]any{"externalVantages": []any{"vps-1", "home"}}},
	{"custom", map[string]any{
		"namespace": map[string]any{"create": true},
		"image":     map[string]any{"repository": "registry.example/pulselb", "tag": "v9.9.9", "pullPolicy": "Always"},
		"dns": map[string]any{
			"zone": "lb.example.com", "nameServers": []any{"ns1.lb.example.com=192.0.2.53"},
			"secondaries": []any{"192.0.2.10:53/pulselb-xfr"},
			"tsigKeys":    []any{map[string]any{"name": "pulselb-xfr", "secretName": "pulselb-dns-tsig"}},
			"service":     map[string]any{"type": "LoadBalancer"},
		},
		"proxy":      map[string]any{"priorityClassName": "pulselb-proxy", "priorityClass": map[string]any{"create": true}},
		"controller": map[string]any{"replicas": 3, "extraArgs": []any{"--workers=8"}},
		"vantages":   5,
	}},
}

func render(t *testing.T, values map[string]any) []Doc {
	t.Helper()
	docs, err := Render(chartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func decode[T any](t *testing.T, docs []Doc, kind, name string) *T {
	t.Helper()
	u := Find(docs, kind, name)
	if u == nil {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("decoding %s %s strictly: %v", kind, name, err)
	}
	return &out
}

func TestManifestsDefaults(t *testing.T) {
	docs := render(t, BaseValues())
	image := "ghcr.io/pulselb/pulselb:0.1.0"

	t.Run("Namespace", func(t *testing.T) {
		ns := decode[corev1.Namespace](t, docs, "Namespace", Namespace)
		want := map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged",
			"pod-security.kubernetes.io/warn":    "restricted",
			"pod-security.kubernetes.io/audit":   "restricted",
		}
		for k, v := range want {
			if ns.Labels[k] != v {
				t.Errorf("namespace label %s = %q, want %q", k, ns.Labels[k], v)
			}
		}
		if Find(render(t, nil), "Namespace", Namespace) != nil {
			t.Error("chart defaults render the Namespace; helm install --create-namespace would conflict with it")
		}
	})

	t.Run("NamespacedObjectsInPulselbSystem", func(t *testing.T) {
		for _, d := range docs {
			switch d.Object.GetKind() {
			case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
				"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PriorityClass":
				if d.Object.GetNamespace() != "" {
					t.Errorf("cluster-scoped %s %s has namespace %q", d.Object.GetKind(), d.Object.GetName(), d.Object.GetNamespace())
				}
			default:
				if d.Object.GetNamespace() != Namespace {
					t.Errorf("%s %s in namespace %q, want %s", d.Object.GetKind(), d.Object.GetName(), d.Object.GetNamespace(), Namespace)
				}
			}
		}
	})

	t.Run("CRDs", func(t *testing.T) {
		var crds []string
		for _, d := range docs {
			if IsCRD(d.Object) {
				crds = append(crds, d.Object.GetName())
			}
		}
		if !slices.Equal(crds, []string{"probereports.pulselb.io"}) {
			t.Errorf("CRDs %v, want only probereports.pulselb.io (the DNSEndpoint CRD belongs to external-dns)", crds)
		}
	})

	t.Run("Controller", func(t *testing.T) {
		d := decode[appsv1.Deployment](t, docs, "Deployment", "pulselb-controller")
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas %v, want 2", d.Spec.Replicas)
		}
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != "pulselb-controller" {
			t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
		}
		c := pod.Containers[0]
		if c.Image != image {
			t.Errorf("image %q, want %q", c.Image, image)
		}
		for _, want := range []string{"controller", "--proxy-image=" + image, "--probe-reports=true", "--leader-elect=true",
			"--dns-zone=lb.internal", "--dns-listen=:5353", "--metrics-address=:9471", "--vantages=3"} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("controller args %q lack %q", c.Args, want)
			}
		}
		if !hasFieldEnv(c, "PULSELB_NAMESPACE", "metadata.namespace") {
			t.Errorf("controller env %+v lacks PULSELB_NAMESPACE from metadata.namespace", c.Env)
		}
		checkRestricted(t, pod, c)
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
				t.Errorf("probe %+v, want GET /healthz on the metrics port", p)
			}
		}
		svc := decode[corev1.Service](t, docs, "Service", "pulselb-dns")
		for _, p := range svc.Spec.Ports {
			if p.Port != 53 || p.TargetPort.String() != "dns-"+strings.ToLower(string(p.Protocol)) {
				t.Errorf("pulselb-dns port %+v, want 53 to the container's DNS port", p)
			}
		}
		pdb := Find(docs, "PodDisruptionBudget", "pulselb-controller")
		if pdb == nil {
			t.Error("no PodDisruptionBudget for the controller")
		}
	})

	t.Run("Prober", func(t *testing.T) {
		ds := decode[appsv1.DaemonSet](t, docs, "DaemonSet", "pulselb-prober")
		pod := ds.Spec.Template.Spec
		// contract.ProberAppName: the controller and the probers pick vantages
		// among pods with this label.
		if got := ds.Spec.Template.Labels["app.kubernetes.io/name"]; got != "pulselb-prober" {
			t.Errorf("prober pod label app.kubernetes.io/name = %q, want pulselb-prober", got)
		}
		if pod.ServiceAccountName != "pulselb-prober" {
			t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
		}
		c := pod.Containers[0]
		if !hasFieldEnv(c, "PULSELB_NODE_NAME", "spec.nodeName") {
			t.Errorf("prober env %+v lacks PULSELB_NODE_NAME from spec.nodeName", c.Env)
		}
		var beacon bool
		for _, p := range c.Ports {
			beacon = beacon || p.Name == "beacon" && p.HostPort == 9472 && p.ContainerPort == 9472
		}
		if !beacon {
			t.Errorf("prober ports %+v lack the beacon hostPort 9472", c.Ports)
		}
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
		}) {
			t.Errorf("prober tolerations %+v do not tolerate every taint", pod.Tolerations)
		}
		checkRestricted(t, pod, c)
	})

	t.Run("ExternalVantages", func(t *testing.T) {
		docs := render(t, map[string]any{"externalVantages": []any{"vps-1"}})
		for _, kind := range []string{"ServiceAccount", "ClusterRoleBinding", "RoleBinding"} {
			if Find(docs, kind, "pulselb-vantage-vps-1") == nil {
				t.Errorf("no %s pulselb-vantage-vps-1", kind)
			}
		}
		sec := decode[corev1.Secret](t, docs, "Secret", "pulselb-vantage-vps-1-token")
		if sec.Type != corev1.SecretTypeServiceAccountToken || sec.Annotations[corev1.ServiceAccountNameKey] != "pulselb-vantage-vps-1" {
			t.Errorf("token Secret %+v is not the ServiceAccount's token", sec)
		}
		role := decode[rbacv1.Role](t, docs, "Role", "pulselb-external-vantage")
		cr := decode[rbacv1.ClusterRole](t, docs, "ClusterRole", "pulselb-external-vantage")
		for _, r := range append(role.Rules, cr.Rules...) {
			if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "pods") || slices.Contains(r.Verbs, "delete") {
				t.Errorf("external vantage rule %+v: no pods, Secrets or deletes", r)
			}
		}
		for _, name := range []string{"pulselb-probereport-own-vantage", "pulselb-prober-lease-own-vantage"} {
			policy := decode[admissionv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy", name)
			if got := policy.Spec.MatchConditions[0].Expression; !strings.Contains(got, `startsWith("system:serviceaccount:pulselb-system:pulselb-vantage-")`) {
				t.Errorf("%s: match condition %q does not select the vantages' accounts", name, got)
			}
			if got := policy.Spec.Validations[0].Expression; !strings.Contains(got, "substring(53)") {
				t.Errorf("%s: validation %q does not compare the name with the account's suffix", name, got)
			}
		}
		if docs := render(t, nil); Find(docs, "ServiceAccount", "pulselb-vantage-vps-1") != nil {
			t.Error("a vantage's ServiceAccount rendered with the defaults")
		}
	})

	t.Run("NoServiceMonitorByDefault", func(t *testing.T) {
		for _, d := range docs {
			if d.Object.GetKind() == "ServiceMonitor" {
				t.Errorf("ServiceMonitor %s rendered with the defaults", d.Object.GetName())
			}
		}
	})

	t.Run("AdmissionPolicy", func(t *testing.T) {
		for _, tc := range []struct {
			name, resource, compare string
		}{
			{"pulselb-probereport-own-node", "probereports", `request.userInfo.extra["authentication.kubernetes.io/node-name"][0] == request.name`},
			{"pulselb-prober-lease-own-node", "leases", `"pulselb-prober-" + request.userInfo.extra["authentication.kubernetes.io/node-name"][0] == request.name`},
		} {
			policy := decode[admissionv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy", tc.name)
			binding := decode[admissionv1.ValidatingAdmissionPolicyBinding](t, docs, "ValidatingAdmissionPolicyBinding", tc.name)
			if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
				t.Errorf("%s: binding %+v does not deny with the policy", tc.name, binding.Spec)
			}
			if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionv1.Fail {
				t.Errorf("%s: failurePolicy %v, want Fail", tc.name, policy.Spec.FailurePolicy)
			}
			if rules := policy.Spec.MatchConstraints.ResourceRules; len(rules) != 1 || !slices.Contains(rules[0].Resources, tc.resource) {
				t.Errorf("%s: resource rules %+v, want %s", tc.name, rules, tc.resource)
			}
			if got := policy.Spec.MatchConditions[0].Expression; !strings.Contains(got, `"system:serviceaccount:pulselb-system:pulselb-prober"`) {
				t.Errorf("%s: match condition %q does not name the prober's service account", tc.name, got)
			}
			if got := policy.Spec.Validations[0].Expression; !strings.Contains(got, tc.compare) {
				t.Errorf("%s: validation %q does not compare the token's node with the object's name", tc.name, got)
			}
		}
	})
}

func hasFieldEnv(c corev1.Container, name, path string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == path
	})
}

// checkRestricted checks the container meets the restricted PodSecurity
// profile and has a read-only root file system.
func checkRestricted(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatalf("container %s has no securityContext", c.Name)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
		t.Errorf("container %s may run as root", c.Name)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("container %s has a writable root file system", c.Name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container %s allows privilege escalation", c.Name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container %s capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
	case pod.HostNetwork:
		t.Errorf("pod of %s uses the host network", c.Name)
	}
}

// TestManifestsValueSets renders every value set and checks what each
// switch changes.
func TestManifestsValueSets(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			docs := render(t, vs.values)
			monitors := 0
			var dnsendpointRule bool
			for _, d := range docs {
				if d.Object.GetKind() == "ServiceMonitor" {
					monitors++
				}
			}
			cr := decode[rbacv1.ClusterRole](t, docs, "ClusterRole", "pulselb-controller")
			for _, r := range cr.Rules {
				dnsendpointRule = dnsendpointRule || slices.Contains(r.Resources, "dnsendpoints")
			}
			ctl := decode[appsv1.Deployment](t, docs, "Deployment", "pulselb-controller")
			args := ctl.Spec.Template.Spec.Containers[0].Args
			switch vs.name {
			case "serviceMonitor":
				if monitors != 2 {
					t.Errorf("%d ServiceMonitors, want 2 (controller and prober)", monitors)
				}
				// No ServiceMonitor CRD in the harness: check it selects
				// the metrics Service and its port by hand.
				for _, comp := range []string{"controller", "prober"} {
					sm := Find(docs, "ServiceMonitor", "pulselb-"+comp)
					svc := Find(docs, "Service", "pulselb-"+comp+"-metrics")
					if sm == nil || svc == nil {
						t.Fatalf("no ServiceMonitor or metrics Service for %s", comp)
					}
					sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
					for k, v := range sel {
						if svc.GetLabels()[k] != v {
							t.Errorf("ServiceMonitor %s selects %s=%s, which Service %s lacks", sm.GetName(), k, v, svc.GetName())
						}
					}
					eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
					if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
						t.Errorf("ServiceMonitor %s endpoints %v, want the metrics port", sm.GetName(), eps)
					}
					if sm.GetLabels()["release"] != "prom" {
						t.Errorf("ServiceMonitor %s lacks serviceMonitor.labels", sm.GetName())
					}
				}
			case "dnsendpoints-no-dns-class-only":
				if !dnsendpointRule || !slices.Contains(args, "--dnsendpoints=true") || !slices.Contains(args, "--class-only=true") {
					t.Errorf("dnsendpoints: rule %v, args %q", dnsendpointRule, args)
				}
				if Find(docs, "Service", "pulselb-dns") != nil || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--dns-zone") }) {
					t.Error("an empty dns.zone still renders DNS")
				}
			case "no-probe-reports":
				for _, kind := range []string{"DaemonSet", "ServiceAccount", "ValidatingAdmissionPolicy"} {
					if Find(docs, kind, "pulselb-prober") != nil || kind == "ValidatingAdmissionPolicy" && (Find(docs, kind, "pulselb-probereport-own-node") != nil || Find(docs, kind, "pulselb-prober-lease-own-node") != nil) {
						t.Errorf("probeReports=false still renders the prober's %s", kind)
					}
				}
				if !slices.Contains(args, "--probe-reports=false") {
					t.Errorf("controller args %q", args)
				}
			case "custom":
				for _, want := range []string{"--proxy-image=registry.example/pulselb:v9.9.9", "--proxy-image-pull-policy=Always",
					"--dns-ns=ns1.lb.example.com=192.0.2.53", "--dns-secondaries=192.0.2.10:53/pulselb-xfr",
					"--dns-tsig-key=pulselb-xfr:/etc/pulselb/tsig/pulselb-xfr/secret", "--proxy-priority-class=pulselb-proxy",
					"--vantages=5", "--workers=8"} {
					if !slices.Contains(args, want) {
						t.Errorf("controller args %q lack %q", args, want)
					}
				}
				if Find(docs, "PriorityClass", "pulselb-proxy") == nil {
					t.Error("no PriorityClass pulselb-proxy")
				}
				ds := decode[appsv1.DaemonSet](t, docs, "DaemonSet", "pulselb-prober")
				if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--vantages=5") {
					t.Errorf("prober args %q lack --vantages=5", ds.Spec.Template.Spec.Containers[0].Args)
				}
			default:
				if monitors != 0 || dnsendpointRule {
					t.Errorf("%d ServiceMonitors, dnsendpoints rule %v; want neither by default", monitors, dnsendpointRule)
				}
			}
		})
	}
}

// TestManifestsBadValues checks that values the chart cannot honour fail
// the render with a message naming them.
func TestManifestsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"serviceMonitor without metrics Services", map[string]any{
			"serviceMonitor": map[string]any{"enabled": true}, "metrics": map[string]any{"service": false}}, "serviceMonitor.enabled needs metrics.service=true"},
		{"creating a built-in priority class", map[string]any{
			"proxy": map[string]any{"priorityClass": map[string]any{"create": true}}}, "system- priority classes are built in"},
		{"no vantages", map[string]any{"vantages": 0}, "vantages"},
		{"unknown proxy mode", map[string]any{"proxy": map[string]any{"mode": "fast"}}, "/proxy/mode"},
		{"unknown pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "/image/pullPolicy"},
		{"privileged DNS port", map[string]any{"dns": map[string]any{"listenPort": 53}}, "/dns/listenPort"},
		{"bad heartbeat", map[string]any{"prober": map[string]any{"heartbeat": "10 seconds"}}, "/prober/heartbeat"},
		{"tsig key without secret", map[string]any{"dns": map[string]any{"tsigKeys": []any{map[string]any{"name": "k"}}}}, "secretName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(chartDir, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestManifestsHelmLint runs `helm lint --strict` on the chart with every
// value set.
func TestManifestsHelmLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = Namespace
			l.KubeVersion = kv
			res := l.Run([]string{chartDir}, vs.values)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("helm lint: %v", err)
			}
		})
	}
}
