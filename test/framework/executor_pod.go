package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// materialiseVolumes writes each volume of the pod into dir and returns the
// directory (or, for hostPath, the host path) of each volume by name.
func (e *Executor) materialiseVolumes(ctx context.Context, pod *corev1.Pod, podIP, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		out[v.Name] = vdir
		var err error
		switch {
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			out[v.Name] = v.HostPath.Path
		case v.Secret != nil:
			err = e.writeSecret(ctx, pod, vdir, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
		case v.ConfigMap != nil:
			err = e.writeConfigMap(ctx, pod, vdir, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		case v.DownwardAPI != nil:
			err = writeDownwardAPI(pod, podIP, vdir, v.DownwardAPI.Items)
		case v.Image != nil:
			// The image's root filesystem, unpacked once, mounted read-only
			// as a kubelet does; an image the executor does not have is a
			// pull that fails.
			archive, ok := e.opts.Images[v.Image.Reference]
			if !ok {
				err = &configError{"ErrImagePull", fmt.Sprintf("volume %q: image %q is not among the executor's images", v.Name, v.Image.Reference)}
				break
			}
			var img *unpackedImage
			if img, err = e.image(archive); err == nil {
				out[v.Name] = img.rootfs
			}
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ServiceAccountToken != nil:
					err = e.writeToken(ctx, pod, vdir, s.ServiceAccountToken)
				case s.Secret != nil:
					err = e.writeSecret(ctx, pod, vdir, s.Secret.Name, s.Secret.Items, s.Secret.Optional)
				case s.ConfigMap != nil:
					err = e.writeConfigMap(ctx, pod, vdir, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional)
				case s.DownwardAPI != nil:
					err = writeDownwardAPI(pod, podIP, vdir, s.DownwardAPI.Items)
				default:
					err = &configError{"CreateContainerConfigError", fmt.Sprintf("projected volume %q: unsupported source", v.Name)}
				}
				if err != nil {
					break
				}
			}
		default:
			err = &configError{"CreateContainerConfigError", fmt.Sprintf("volume %q: the local executor supports emptyDir, hostPath, secret, configMap, downwardAPI, image and projected volumes", v.Name)}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (e *Executor) writeSecret(ctx context.Context, pod *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %q: %w", name, err)
	}
	return writeKeys(dir, s.Data, items, 0o600)
}

func (e *Executor) writeConfigMap(ctx context.Context, pod *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return writeKeys(dir, data, items, 0o644)
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode) error {
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %q not found", it.Key)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeAtomically(p, v, mode); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomically replaces path's content at once, as a kubelet swaps a
// volume's files (a reader never sees a half-written one), owned as its
// directory is (the container's user, once the pod runs).
func writeAtomically(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".write-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(mode), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	if st, err := os.Stat(dir); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			_ = os.Lchown(tmp, int(sys.Uid), int(sys.Gid))
		}
	}
	return os.Rename(tmp, path)
}

// refreshSecrets writes the pod's Secret volumes again when their Secrets
// change (a certificate cert-manager renewed), every 2 s until the pod has
// finished, as a kubelet syncs them.
func (e *Executor) refreshSecrets(ctx context.Context, proc *podProcess) {
	if !slices.ContainsFunc(proc.pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil }) {
		return
	}
	versions := map[string]string{}
	for {
		select {
		case <-proc.done:
			return
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		for _, v := range proc.pod.Spec.Volumes {
			if v.Secret == nil {
				continue
			}
			s, err := e.cp.Kube.CoreV1().Secrets(proc.pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil || versions[v.Name] == s.ResourceVersion {
				continue
			}
			if err := writeKeys(proc.volumes[v.Name], s.Data, v.Secret.Items, 0o600); err == nil {
				versions[v.Name] = s.ResourceVersion
			}
		}
	}
}

func writeDownwardAPI(pod *corev1.Pod, podIP, dir string, items []corev1.DownwardAPIVolumeFile) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return &configError{"CreateContainerConfigError", fmt.Sprintf("downwardAPI %q: only fieldRef is supported", it.Path)}
		}
		v, err := fieldValue(pod, podIP, it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeToken asks for a token of the pod's ServiceAccount, bound to the pod,
// as the kubelet does.
func (e *Executor) writeToken(ctx context.Context, pod *corev1.Pod, dir string, src *corev1.ServiceAccountTokenProjection) error {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := e.cp.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of serviceaccount %q: %w", sa, err)
	}
	return os.WriteFile(filepath.Join(dir, src.Path), []byte(tr.Status.Token), 0o600)
}

// containerEnv is the container's environment as a kubelet makes it: the
// in-cluster service variables and defaults, then the image's (imageEnv),
// then the pod's.
func (e *Executor) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container, proc *podProcess, imageEnv []string) ([]string, error) {
	home := filepath.Join(proc.dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	// The kubernetes Service: the API server itself on the host's network,
	// its cluster IP on a pod network.
	host, port := e.cp.APIServerHost, strconv.Itoa(e.cp.APIServerPort)
	if proc.sandbox != nil {
		host, port = e.cp.network.serviceIP, "443"
	}
	vars := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home, "HOSTNAME": pod.Name,
		"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": "tcp://" + host + ":" + port,
	}
	order := slices.Sorted(maps.Keys(vars))
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, from := range c.EnvFrom {
		data := map[string]string{}
		switch {
		case from.SecretRef != nil:
			s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional) {
				return nil, fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)
			}
			if s != nil {
				for k, v := range s.Data {
					data[k] = string(v)
				}
			}
		case from.ConfigMapRef != nil:
			cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional) {
				return nil, fmt.Errorf("envFrom configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			if cm != nil {
				data = cm.Data
			}
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			set(from.Prefix+k, data[k])
		}
	}
	for _, ev := range c.Env {
		v, err := e.envValue(ctx, pod, proc.podIP(), ev, vars)
		if err != nil {
			return nil, err
		}
		set(ev.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func (e *Executor) envValue(ctx context.Context, pod *corev1.Pod, podIP string, ev corev1.EnvVar, vars map[string]string) (string, error) {
	if ev.ValueFrom == nil {
		return expand(ev.Value, vars), nil
	}
	src := ev.ValueFrom
	switch {
	case src.FieldRef != nil:
		return fieldValue(pod, podIP, src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		optional := src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", nil
			}
			return "", fmt.Errorf("env %s: secret %q: %w", ev.Name, src.SecretKeyRef.Name, err)
		}
		v, ok := s.Data[src.SecretKeyRef.Key]
		if !ok && !optional {
			return "", fmt.Errorf("env %s: key %q not in secret %q", ev.Name, src.SecretKeyRef.Key, src.SecretKeyRef.Name)
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		optional := src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", nil
			}
			return "", fmt.Errorf("env %s: configmap %q: %w", ev.Name, src.ConfigMapKeyRef.Name, err)
		}
		v, ok := cm.Data[src.ConfigMapKeyRef.Key]
		if !ok && !optional {
			return "", fmt.Errorf("env %s: key %q not in configmap %q", ev.Name, src.ConfigMapKeyRef.Key, src.ConfigMapKeyRef.Name)
		}
		return v, nil
	}
	return "", fmt.Errorf("env %s: unsupported valueFrom", ev.Name)
}

func fieldValue(pod *corev1.Pod, podIP, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return "127.0.0.1", nil
	case "status.podIP":
		return podIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']")], nil
		}
	}
	return "", &configError{"CreateContainerConfigError", fmt.Sprintf("fieldRef %q is not supported by the local executor", path)}
}

// expand replaces $(VAR) references as the kubelet does; $$ escapes.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func expandAll(args, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for i, a := range args {
		args[i] = expand(a, vars)
	}
	return args
}
