package cluster

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

func volumeTestPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "uid-1",
			Labels: map[string]string{"app": "web", "tier": "front"}, Annotations: map[string]string{"note": `say "hi"`}},
		Spec: corev1.PodSpec{
			NodeName: "node-1", ServiceAccountName: "robot",
			Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
			}}},
		},
	}
}

func volumeTestClient(t *testing.T) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns1"},
			Data: map[string]string{"a.conf": "alpha", "b.conf": "beta"}, BinaryData: map[string][]byte{"bin": {0, 1}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns1"}, Data: map[string][]byte{"password": []byte("s3cret")}},
	)
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		if tr.Spec.BoundObjectRef == nil || tr.Spec.BoundObjectRef.UID != "uid-1" {
			t.Errorf("token request not bound to the pod: %+v", tr.Spec.BoundObjectRef)
		}
		tr.Status.Token = "token-for-" + ca.GetNamespace() + "/" + strings.Join(tr.Spec.Audiences, ",")
		return true, tr, nil
	})
	return cs
}

func TestVolumeMounts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mode := func(m int32) *int32 { return &m }
	type file struct {
		path, content string
		mode          fs.FileMode
	}
	tests := []struct {
		name    string
		vol     corev1.VolumeSource
		mount   corev1.VolumeMount
		want    []file
		wantErr string
	}{
		{
			name:  "configMap all keys with defaultMode",
			vol:   corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: mode(0o600)}},
			mount: corev1.VolumeMount{MountPath: "/etc/app"},
			want:  []file{{"a.conf", "alpha", 0o600}, {"b.conf", "beta", 0o600}, {"bin", "\x00\x01", 0o600}},
		},
		{
			name: "configMap items with their paths and modes",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
				Items: []corev1.KeyToPath{{Key: "a.conf", Path: "sub/app.conf", Mode: mode(0o400)}}}},
			mount: corev1.VolumeMount{MountPath: "/etc/app"},
			want:  []file{{"sub/app.conf", "alpha", 0o400}},
		},
		{
			name:    "configMap item key missing",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "nope", Path: "x"}}}},
			mount:   corev1.VolumeMount{MountPath: "/etc/app"},
			wantErr: `configmap cfg has no key "nope"`,
		},
		{
			name:    "configMap missing",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}},
			mount:   corev1.VolumeMount{MountPath: "/etc/app"},
			wantErr: "reading configmap gone",
		},
		{
			name:  "configMap missing but optional",
			vol:   corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr.To(true)}},
			mount: corev1.VolumeMount{MountPath: "/etc/app"},
			want:  nil,
		},
		{
			name:  "secret default mode 0644",
			vol:   corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}},
			mount: corev1.VolumeMount{MountPath: "/etc/creds", ReadOnly: true},
			want:  []file{{"password", "s3cret", 0o644}},
		},
		{
			name: "downwardAPI fields, labels and resources",
			vol: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
				{Path: "tier", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}},
				{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
				{Path: "cpu-limit", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu"}},
				{Path: "cpu-request", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "requests.cpu", Divisor: resource.MustParse("1m")}},
			}}},
			mount: corev1.VolumeMount{MountPath: "/etc/podinfo"},
			want: []file{{"name", "web", 0o644}, {"labels", "app=\"web\"\ntier=\"front\"\n", 0o644}, {"annotations", "note=\"say \\\"hi\\\"\"\n", 0o644},
				{"tier", "front", 0o644}, {"mem", "64", 0o644}, {"cpu-limit", "4", 0o644}, {"cpu-request", "250", 0o644}},
		},
		{
			name: "projected token, configMap, secret and downwardAPI",
			vol: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: mode(0o640), Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: ptr.To(int64(3607))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b.conf", Path: "ca.crt"}}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}},
			mount: corev1.VolumeMount{MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
			want:  []file{{"token", "token-for-ns1/vault", 0o640}, {"ca.crt", "beta", 0o640}, {"password", "s3cret", 0o640}, {"namespace", "ns1", 0o640}},
		},
		{
			name:    "unsupported volume type",
			vol:     corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}},
			mount:   corev1.VolumeMount{MountPath: "/mnt"},
			wantErr: "volume type not supported",
		},
		{
			name:    "subPath leaving the volume",
			vol:     corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			mount:   corev1.VolumeMount{MountPath: "/mnt", SubPath: "../../etc"},
			wantErr: "must not contain '..'",
		},
		{
			name:    "relative mountPath",
			vol:     corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			mount:   corev1.VolumeMount{MountPath: "mnt"},
			wantErr: "mountPath must be absolute",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := volumeTestPod()
			pod.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: tt.vol}}
			tt.mount.Name = "v"
			w := &volumeWriter{client: volumeTestClient(t), pod: pod, podIP: "198.18.129.2", hostIP: "198.18.1.1", dir: t.TempDir()}
			mounts, err := w.mounts(ctx, corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{tt.mount}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(mounts) != 1 || mounts[0].dst != tt.mount.MountPath || mounts[0].readOnly != tt.mount.ReadOnly {
				t.Fatalf("mounts %+v, want one onto %s (readOnly %v)", mounts, tt.mount.MountPath, tt.mount.ReadOnly)
			}
			var got []string
			_ = filepath.WalkDir(mounts[0].src, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					got = append(got, p)
				}
				return err
			})
			if len(got) != len(tt.want) {
				t.Errorf("files %v, want %d", got, len(tt.want))
			}
			for _, f := range tt.want {
				p := filepath.Join(mounts[0].src, f.path)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("reading %s: %v", f.path, err)
					continue
				}
				if string(b) != f.content {
					t.Errorf("%s = %q, want %q", f.path, b, f.content)
				}
				if fi, err := os.Stat(p); err == nil && fi.Mode().Perm() != f.mode {
					t.Errorf("%s mode %o, want %o", f.path, fi.Mode().Perm(), f.mode)
				}
			}
		})
	}
}

// TestVolumeRefreshRemovesStaleFiles checks that rewriting a volume drops
// keys that are gone and keeps the directory (and so running mounts).
func TestVolumeRefreshRemovesStaleFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := writeVolumeFiles(dir, []volumeFile{{path: "a", data: []byte("1"), mode: 0o644}, {path: "d/b", data: []byte("2"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dir)
	if err := writeVolumeFiles(dir, []volumeFile{{path: "a", data: []byte("3"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "3" {
		t.Errorf("a = %q, want 3", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "d", "b")); err == nil {
		t.Error("stale d/b kept")
	}
	if after, _ := os.Stat(dir); !os.SameFile(before, after) {
		t.Error("volume directory replaced; running mounts would not see the update")
	}
	if err := writeVolumeFiles(dir, []volumeFile{{path: "../x", data: nil, mode: 0o644}}); err == nil {
		t.Error("a path leaving the volume was written")
	}
}

func TestResourceValue(t *testing.T) {
	pod := volumeTestPod()
	tests := []struct {
		container, resource, divisor, want, wantErr string
	}{
		{"app", "limits.memory", "", "67108864", ""},
		{"app", "limits.memory", "1Mi", "64", ""},
		{"app", "limits.cpu", "", "4", ""}, // unset: node allocatable
		{"app", "requests.cpu", "", "1", ""},
		{"app", "requests.cpu", "1m", "250", ""},
		{"app", "requests.memory", "", "0", ""},
		{"other", "limits.cpu", "", "", `no container "other"`},
		{"app", "cpu", "", "", `unsupported resource "cpu"`},
	}
	for _, tt := range tests {
		ref := &corev1.ResourceFieldSelector{Resource: tt.resource}
		if tt.divisor != "" {
			ref.Divisor = resource.MustParse(tt.divisor)
		}
		got, err := resourceValue(pod, tt.container, ref)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s %s: error %v, want %q", tt.container, tt.resource, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %s/%s = %q, %v; want %q", tt.container, tt.resource, tt.divisor, got, err, tt.want)
		}
	}
}

// TestWithMounts binds volumes in a private mount namespace (root only) and
// checks that teardown removes the mount targets it created.
func TestWithMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	_, ctx := ktesting.NewTestContext(t)
	base := t.TempDir()
	rec := newRecord(base)
	src := filepath.Join(base, "vol")
	if err := writeVolumeFiles(src, []volumeFile{{path: "greeting", data: []byte("hello"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	fileSrc := filepath.Join(src, "greeting")
	dst := filepath.Join(base, "target", "deep", "dir")
	fileDst := filepath.Join(base, "ftarget", "greeting.txt")
	argv, err := withMounts(rec, []bindMount{{src: src, dst: dst, readOnly: true}, {src: fileSrc, dst: fileDst}},
		[]string{"sh", "-c", `cat "$0/greeting" "$1" && ! touch "$0/new" 2>/dev/null`, dst, fileDst})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil || string(out) != "hellohello" {
		t.Fatalf("container saw %q (%v), want hellohello and a read-only mount", out, err)
	}
	// Nothing is mounted outside the container's namespace.
	if b, err := os.ReadFile(fileDst); err != nil || len(b) != 0 {
		t.Errorf("mount target %s outside the container: %q, %v; want an empty file", fileDst, b, err)
	}
	if err := Teardown(ctx, base); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "target"), filepath.Join(base, "ftarget")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("teardown left %s", p)
		}
	}
}

func TestNonShellEnv(t *testing.T) {
	got := nonShellEnv([]string{"PATH=/bin", "CFG_app.conf=port=1", "_ok=1", "9lives=x", "with-dash=y", "A=b=c"})
	want := []string{"CFG_app.conf=port=1", "9lives=x", "with-dash=y"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("nonShellEnv = %q, want %q", got, want)
	}
}
