// Package runnerpod says what a runner pod may be. A user who may create a
// Terraform object but not pods must not get, through CAPTF, a pod Pod
// Security would refuse them: runner pods meet the Pod Security level the
// manager is set to (`--runner-pod-security`, restricted by default)
// whatever their namespace's labels, and choose their nodes only where the
// operator allowed it.
//
// The webhook refuses an object whose Job policy breaks the rules (with the
// field path); the manager checks the merged policy again before every Job
// (an object admitted before, or a cluster default that changed) and fills
// in what the level needs where the user left it unset.
package runnerpod

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Level is a Pod Security Standards level.
type Level string

const (
	Restricted Level = "restricted"
	Baseline   Level = "baseline"
)

// Rules are the operator's: the level, and whether runner pods may choose
// their nodes (nodeSelector, tolerations).
type Rules struct {
	Level              Level
	AllowNodePlacement bool
}

// ParseLevel reads --runner-pod-security.
func ParseLevel(s string) (Level, error) {
	switch l := Level(s); l {
	case Restricted, Baseline:
		return l, nil
	}
	return "", fmt.Errorf("%q: want restricted or baseline", s)
}

// baselineCapabilities may be added at baseline; restricted allows only
// NET_BIND_SERVICE.
var baselineCapabilities = []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

var seLinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// Check refuses what a Job policy at path asks that the rules do not allow.
func (r Rules) Check(jp *infrav1.JobPolicy, path *field.Path) field.ErrorList {
	if jp == nil {
		return nil
	}
	var errs field.ErrorList
	why := fmt.Sprintf("runner pods meet Pod Security %q (--runner-pod-security)", r.level())
	forbid := func(p *field.Path, v any) {
		errs = append(errs, field.Invalid(p, v, why))
	}
	if !r.AllowNodePlacement {
		if len(jp.NodeSelector) > 0 {
			errs = append(errs, field.Forbidden(path.Child("nodeSelector"), "runner pods run where the cluster puts them unless the operator allows node placement (--allow-runner-node-placement)"))
		}
		if len(jp.Tolerations) > 0 {
			errs = append(errs, field.Forbidden(path.Child("tolerations"), "runner pods run where the cluster puts them unless the operator allows node placement (--allow-runner-node-placement)"))
		}
	}
	restricted := r.level() == Restricted
	if psc := jp.PodSecurityContext; psc != nil {
		p := path.Child("podSecurityContext")
		r.checkCommon(p, psc.RunAsNonRoot, psc.RunAsUser, psc.SeccompProfile, psc.SELinuxOptions, psc.WindowsOptions, psc.AppArmorProfile, forbid)
		if len(psc.Sysctls) > 0 {
			forbid(p.Child("sysctls"), psc.Sysctls[0].Name)
		}
	}
	if sc := jp.SecurityContext; sc != nil {
		p := path.Child("securityContext")
		r.checkCommon(p, sc.RunAsNonRoot, sc.RunAsUser, sc.SeccompProfile, sc.SELinuxOptions, sc.WindowsOptions, sc.AppArmorProfile, forbid)
		if sc.Privileged != nil && *sc.Privileged {
			forbid(p.Child("privileged"), true)
		}
		if restricted && sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			forbid(p.Child("allowPrivilegeEscalation"), true)
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			forbid(p.Child("procMount"), *sc.ProcMount)
		}
		if c := sc.Capabilities; c != nil {
			allowed := baselineCapabilities
			if restricted {
				allowed = []corev1.Capability{"NET_BIND_SERVICE"}
			}
			for i, add := range c.Add {
				if !slices.Contains(allowed, add) {
					forbid(p.Child("capabilities", "add").Index(i), add)
				}
			}
		}
	}
	return errs
}

func (r Rules) checkCommon(p *field.Path, runAsNonRoot *bool, runAsUser *int64, seccomp *corev1.SeccompProfile, selinux *corev1.SELinuxOptions,
	windows *corev1.WindowsSecurityContextOptions, apparmor *corev1.AppArmorProfile, forbid func(*field.Path, any)) {
	if r.level() == Restricted {
		if runAsNonRoot != nil && !*runAsNonRoot {
			forbid(p.Child("runAsNonRoot"), false)
		}
		if runAsUser != nil && *runAsUser == 0 {
			forbid(p.Child("runAsUser"), 0)
		}
	}
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		forbid(p.Child("seccompProfile", "type"), seccomp.Type)
	}
	if selinux != nil {
		if !slices.Contains(seLinuxTypes, selinux.Type) {
			forbid(p.Child("seLinuxOptions", "type"), selinux.Type)
		}
		if selinux.User != "" {
			forbid(p.Child("seLinuxOptions", "user"), selinux.User)
		}
		if selinux.Role != "" {
			forbid(p.Child("seLinuxOptions", "role"), selinux.Role)
		}
	}
	if windows != nil && windows.HostProcess != nil && *windows.HostProcess {
		forbid(p.Child("windowsOptions", "hostProcess"), true)
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		forbid(p.Child("appArmorProfile", "type"), apparmor.Type)
	}
}

func (r Rules) level() Level {
	if r.Level == "" {
		return Restricted
	}
	return r.Level
}

// Secure fills in, where the user left them unset, what the level needs:
// a RuntimeDefault seccomp profile, no privilege escalation, every
// capability dropped, and (restricted) a non-root user. Check has refused
// what is set against them.
func (r Rules) Secure(psc *corev1.PodSecurityContext, sc *corev1.SecurityContext) (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	psc, sc = psc.DeepCopy(), sc.DeepCopy()
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if psc.SeccompProfile == nil && sc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if sc.AllowPrivilegeEscalation == nil {
		sc.AllowPrivilegeEscalation = ptr(false)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		sc.Capabilities.Drop = append(sc.Capabilities.Drop, "ALL")
	}
	if r.level() == Restricted && psc.RunAsNonRoot == nil && sc.RunAsNonRoot == nil {
		psc.RunAsNonRoot = ptr(true)
	}
	return psc, sc
}

func ptr[T any](v T) *T { return &v }
