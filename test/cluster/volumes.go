package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// bindMount is one of a container's volume mounts: src on the machine,
// bound onto dst in the container's private mount namespace.
type bindMount struct {
	src, dst string
	readOnly bool
}

// nodeAllocatable is what every simulated node offers (see postStatus); the
// downward API reports it for limits a container does not set.
var nodeAllocatable = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("4"),
	corev1.ResourceMemory: resource.MustParse("8Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// volumeWriter writes a pod's volumes into dir/<volume name>, as the
// kubelet's volume plugins do.
type volumeWriter struct {
	client        kubernetes.Interface
	pod           *corev1.Pod
	podIP, hostIP string
	dir           string
}

// volumeFile is one file of a volume, relative to the volume's directory.
type volumeFile struct {
	path string
	data []byte
	mode fs.FileMode
}

// mounts writes the volumes container c mounts and returns its bind mounts,
// parents before the mounts nested in them.
func (w *volumeWriter) mounts(ctx context.Context, c corev1.Container) ([]bindMount, error) {
	var out []bindMount
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range w.pod.Spec.Volumes {
			if w.pod.Spec.Volumes[i].Name == vm.Name {
				vol = &w.pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, fmt.Errorf("volume mount %s: the pod has no volume %q", vm.MountPath, vm.Name)
		}
		if vm.SubPathExpr != "" {
			return nil, fmt.Errorf("volume mount %s: subPathExpr is not supported by the test kubelet", vm.MountPath)
		}
		if !filepath.IsAbs(vm.MountPath) {
			return nil, fmt.Errorf("volume mount %q: mountPath must be absolute", vm.MountPath)
		}
		src, err := w.write(ctx, vol)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		if vm.SubPath != "" {
			if err := checkRelPath(vm.SubPath); err != nil {
				return nil, fmt.Errorf("volume mount %s: subPath: %w", vm.MountPath, err)
			}
			src = filepath.Join(src, vm.SubPath)
			if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
				// The kubelet creates a missing subPath as a directory.
				if err := os.MkdirAll(src, 0o755); err != nil {
					return nil, fmt.Errorf("volume mount %s: creating subPath: %w", vm.MountPath, err)
				}
			}
		}
		out = append(out, bindMount{src: src, dst: filepath.Clean(vm.MountPath), readOnly: vm.ReadOnly})
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].dst, "/") < strings.Count(out[j].dst, "/")
	})
	return out, nil
}

// write brings volume v's directory up to date and returns its path.
func (w *volumeWriter) write(ctx context.Context, v *corev1.Volume) (string, error) {
	dir := filepath.Join(w.dir, v.Name)
	var files []volumeFile
	var err error
	switch {
	case v.EmptyDir != nil:
		// Shared by the pod's containers and kept across restarts.
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", fmt.Errorf("creating emptyDir: %w", err)
		}
		return dir, os.Chmod(dir, 0o777)
	case v.HostPath != nil:
		if _, err := os.Stat(v.HostPath.Path); err != nil {
			return "", fmt.Errorf("hostPath: %w", err)
		}
		return v.HostPath.Path, nil
	case v.ConfigMap != nil:
		files, err = w.configMapFiles(ctx, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode)
	case v.Secret != nil:
		files, err = w.secretFiles(ctx, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode)
	case v.DownwardAPI != nil:
		files, err = w.downwardAPIFiles(v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		files, err = w.projectedFiles(ctx, v.Projected)
	default:
		return "", errors.New("volume type not supported by the test kubelet (emptyDir, hostPath, configMap, secret, downwardAPI and projected are)")
	}
	if err != nil {
		return "", err
	}
	return dir, writeVolumeFiles(dir, files)
}

func defaultMode(m *int32) fs.FileMode {
	if m == nil {
		return 0o644
	}
	return fs.FileMode(*m) & fs.ModePerm
}

// keyFiles maps data to files: every key, or only the items' keys at their
// paths; a missing item key is an error unless optional.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, mode *int32) ([]volumeFile, error) {
	var files []volumeFile
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			files = append(files, volumeFile{path: k, data: data[k], mode: defaultMode(mode)})
		}
		return files, nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			if ptrOrBool(optional) {
				continue
			}
			return nil, fmt.Errorf("%s %s has no key %q", kind, name, it.Key)
		}
		m := defaultMode(mode)
		if it.Mode != nil {
			m = fs.FileMode(*it.Mode) & fs.ModePerm
		}
		files = append(files, volumeFile{path: it.Path, data: d, mode: m})
	}
	return files, nil
}

func (w *volumeWriter) configMapFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional *bool, mode *int32) ([]volumeFile, error) {
	cm, err := w.client.CoreV1().ConfigMaps(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && ptrOrBool(optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, optional, mode)
}

func (w *volumeWriter) secretFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional *bool, mode *int32) ([]volumeFile, error) {
	s, err := w.client.CoreV1().Secrets(w.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && ptrOrBool(optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	return keyFiles("secret", name, s.Data, items, optional, mode)
}

func (w *volumeWriter) downwardAPIFiles(items []corev1.DownwardAPIVolumeFile, mode *int32) ([]volumeFile, error) {
	var files []volumeFile
	for _, it := range items {
		var v string
		switch {
		case it.FieldRef != nil:
			v = downwardField(w.pod, w.podIP, w.hostIP, it.FieldRef.FieldPath, true)
		case it.ResourceFieldRef != nil:
			var err error
			if v, err = resourceValue(w.pod, it.ResourceFieldRef.ContainerName, it.ResourceFieldRef); err != nil {
				return nil, fmt.Errorf("downward API file %s: %w", it.Path, err)
			}
		default:
			return nil, fmt.Errorf("downward API file %s has neither fieldRef nor resourceFieldRef", it.Path)
		}
		m := defaultMode(mode)
		if it.Mode != nil {
			m = fs.FileMode(*it.Mode) & fs.ModePerm
		}
		files = append(files, volumeFile{path: it.Path, data: []byte(v), mode: m})
	}
	return files, nil
}

func (w *volumeWriter) projectedFiles(ctx context.Context, p *corev1.ProjectedVolumeSource) ([]volumeFile, error) {
	var files []volumeFile
	for _, s := range p.Sources {
		var more []volumeFile
		var err error
		switch {
		case s.ConfigMap != nil:
			more, err = w.configMapFiles(ctx, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, p.DefaultMode)
		case s.Secret != nil:
			more, err = w.secretFiles(ctx, s.Secret.Name, s.Secret.Items, s.Secret.Optional, p.DefaultMode)
		case s.DownwardAPI != nil:
			more, err = w.downwardAPIFiles(s.DownwardAPI.Items, p.DefaultMode)
		case s.ServiceAccountToken != nil:
			var token string
			if token, err = w.token(ctx, s.ServiceAccountToken); err == nil {
				more = []volumeFile{{path: s.ServiceAccountToken.Path, data: []byte(token), mode: defaultMode(p.DefaultMode)}}
			}
		case s.ClusterTrustBundle != nil && ptrOrBool(s.ClusterTrustBundle.Optional):
			// Not simulated; an optional bundle may be absent.
		default:
			err = errors.New("projected source not supported by the test kubelet (configMap, secret, downwardAPI and serviceAccountToken are)")
		}
		if err != nil {
			return nil, err
		}
		files = append(files, more...)
	}
	return files, nil
}

// token requests a service-account token bound to the pod.
func (w *volumeWriter) token(ctx context.Context, p *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, UID: w.pod.UID},
	}}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	res, err := w.client.CoreV1().ServiceAccounts(w.pod.Namespace).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting token for service account %s/%s: %w", w.pod.Namespace, sa, err)
	}
	return res.Status.Token, nil
}

// checkRelPath rejects paths that could leave a volume's directory.
func checkRelPath(p string) error {
	if p == "" || filepath.IsAbs(p) {
		return fmt.Errorf("path %q must be relative and not empty", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
	}
	return nil
}

// writeVolumeFiles writes files under dir and removes files left from an
// earlier content, in place so that running containers see the update.
func writeVolumeFiles(dir string, files []volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating volume dir: %w", err)
	}
	keep := map[string]bool{}
	for _, f := range files {
		if err := checkRelPath(f.path); err != nil {
			return err
		}
		path := filepath.Join(dir, f.path)
		keep[path] = true
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("creating directory of %s: %w", f.path, err)
		}
		tmp := path + ".plt-tmp"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		if err := os.Chmod(tmp, f.mode); err != nil { // WriteFile's mode is masked by the umask
			return fmt.Errorf("setting mode of %s: %w", f.path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !keep[path] {
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("removing stale %s: %w", path, err)
			}
		}
		return nil
	})
}

// downwardField resolves a downward-API field path; volumes (asFile) also
// get metadata.labels and metadata.annotations as key="value" lines.
func downwardField(pod *corev1.Pod, podIP, hostIP, path string, asFile bool) string {
	switch path {
	case "metadata.name":
		return pod.Name
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.uid":
		return string(pod.UID)
	case "spec.nodeName":
		return pod.Spec.NodeName
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName
	case "status.podIP", "status.podIPs":
		return podIP
	case "status.hostIP", "status.hostIPs":
		return hostIP
	}
	if asFile && (path == "metadata.labels" || path == "metadata.annotations") {
		m := pod.Labels
		if path == "metadata.annotations" {
			m = pod.Annotations
		}
		var b strings.Builder
		for _, k := range sortedKeys(m) {
			fmt.Fprintf(&b, "%s=%q\n", k, m[k])
		}
		return b.String()
	}
	for _, m := range []struct {
		prefix string
		from   map[string]string
	}{{"metadata.labels['", pod.Labels}, {"metadata.annotations['", pod.Annotations}} {
		if strings.HasPrefix(path, m.prefix) && strings.HasSuffix(path, "']") {
			return m.from[path[len(m.prefix):len(path)-2]]
		}
	}
	return ""
}

// resourceValue is a container's resource limit or request for the
// downward API, divided by the divisor and rounded up; an unset limit is
// the node's allocatable.
func resourceValue(pod *corev1.Pod, container string, ref *corev1.ResourceFieldSelector) (string, error) {
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == container {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef: pod has no container %q", container)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	res := corev1.ResourceName(name)
	var q resource.Quantity
	if kind == "limits" {
		var set bool
		if q, set = c.Resources.Limits[res]; !set {
			q = nodeAllocatable[res]
		}
	} else {
		q = c.Resources.Requests[res]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if res == corev1.ResourceCPU {
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
}

// ensureMountTarget makes path exist on the machine (a directory, or an
// empty file for a file mount) so it can be bound onto in a container's
// mount namespace, and records removing what it created.
func ensureMountTarget(rec *record, path string, dir bool) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checking mount target %s: %w", path, err)
	}
	// The missing ancestors, deepest first: teardown removes them in
	// this order, each only if still empty.
	var missing []string
	for p := filepath.Dir(path); p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	if dir {
		if err := rec.add(item{Kind: "command", Args: append([]string{"rmdir", "--ignore-fail-on-non-empty", path}, missing...)}); err != nil {
			return err
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("creating mount target %s: %w", path, err)
		}
		return nil
	}
	rm := "find " + shellQuote(path) + " -maxdepth 0 -type f -empty -delete"
	if len(missing) > 0 {
		rm += "; rmdir --ignore-fail-on-non-empty"
		for _, m := range missing {
			rm += " " + shellQuote(m)
		}
	}
	if err := rec.add(item{Kind: "command", Args: []string{"sh", "-c", rm}}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating directory of mount target %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("creating mount target %s: %w", path, err)
	}
	return f.Close()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// mountScript binds "src dst rw|ro" triples given as arguments up to "--",
// then execs the rest: the start of every container with volumes, run in
// its own private mount namespace.
const mountScript = `while [ "$1" != -- ]; do
  mount --bind "$1" "$2" || exit 126
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2" || exit 126; fi
  shift 3
done
shift
exec "$@"`

// withMounts wraps argv so that it runs in a private mount namespace with
// the mounts in place, creating their targets on the machine first.
func withMounts(rec *record, mounts []bindMount, argv []string) ([]string, error) {
	if len(mounts) == 0 {
		return argv, nil
	}
	out := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mountScript, "sh"}
	for _, m := range mounts {
		fi, err := os.Stat(m.src)
		if err != nil {
			return nil, fmt.Errorf("volume source for %s: %w", m.dst, err)
		}
		if err := ensureMountTarget(rec, m.dst, fi.IsDir()); err != nil {
			return nil, err
		}
		mode := "rw"
		if m.readOnly {
			mode = "ro"
		}
		out = append(out, m.src, m.dst, mode)
	}
	return append(append(out, "--"), argv...), nil
}
