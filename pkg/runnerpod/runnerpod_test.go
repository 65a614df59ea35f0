package runnerpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

func TestCheck(t *testing.T) {
	root := int64(0)
	tests := map[string]struct {
		rules Rules
		jp    infrav1.JobPolicy
		want  []string // field paths refused
	}{
		"nothing asked": {},
		"a non-root user and a seccomp profile": {jp: infrav1.JobPolicy{
			PodSecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), FSGroup: ptr(int64(1000)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			SecurityContext:    &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}}},
		}},
		"the pod a hostile tenant asked for": {jp: infrav1.JobPolicy{
			PodSecurityContext: &corev1.PodSecurityContext{RunAsUser: &root, Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true), AllowPrivilegeEscalation: ptr(true), RunAsNonRoot: ptr(false),
				Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane": ""},
			Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		}, want: []string{"spec.jobs.nodeSelector", "spec.jobs.tolerations", "spec.jobs.podSecurityContext.runAsUser", "spec.jobs.podSecurityContext.sysctls",
			"spec.jobs.securityContext.runAsNonRoot", "spec.jobs.securityContext.seccompProfile.type", "spec.jobs.securityContext.privileged",
			"spec.jobs.securityContext.allowPrivilegeEscalation", "spec.jobs.securityContext.capabilities.add[0]"}},
		"baseline allows root and the default capabilities": {rules: Rules{Level: Baseline}, jp: infrav1.JobPolicy{
			PodSecurityContext: &corev1.PodSecurityContext{RunAsUser: &root},
			SecurityContext:    &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CHOWN"}}},
		}},
		"baseline still refuses privileged and SYS_ADMIN": {rules: Rules{Level: Baseline}, jp: infrav1.JobPolicy{
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
		}, want: []string{"spec.jobs.securityContext.privileged", "spec.jobs.securityContext.capabilities.add[0]"}},
		"node placement the operator allowed": {rules: Rules{AllowNodePlacement: true}, jp: infrav1.JobPolicy{
			NodeSelector: map[string]string{"pool": "runners"}, Tolerations: []corev1.Toleration{{Key: "runners", Operator: corev1.TolerationOpExists}},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := tc.rules.Check(&tc.jp, field.NewPath("spec", "jobs"))
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("refused %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSecure: what the user left unset is filled in so the pod meets the
// level; what the user set (and Check allowed) stays.
func TestSecure(t *testing.T) {
	psc, sc := Rules{}.Secure(nil, nil)
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("restricted defaults: pod %+v container %+v", psc, sc)
	}
	own := &corev1.SecurityContext{RunAsUser: ptr(int64(65532)), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
	_, sc = Rules{}.Secure(nil, own)
	if *sc.RunAsUser != 65532 || sc.Capabilities.Add[0] != "NET_BIND_SERVICE" || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("the user's settings changed: %+v", sc)
	}
	if own.Capabilities.Drop != nil {
		t.Error("Secure changed its argument")
	}
	psc, _ = Rules{Level: Baseline}.Secure(nil, nil)
	if psc.RunAsNonRoot != nil {
		t.Error("baseline asks for a non-root user")
	}
}
