package webhook

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/run"
)

// Bounds of spec.drift.interval: checks more often than a minute would keep a
// runner Job busy all the time; the upper bound is the CRD's.
const (
	MinDriftInterval = 10 * time.Second
	MaxDriftInterval = 168 * time.Hour
)

var (
	variableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	planHash     = regexp.MustCompile(`^[0-9a-f]{16}$`)
	moduleDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	backupStamp  = regexp.MustCompile(`^[0-9]{8}-[0-9]{6}(-[0-9]+)?$`)
	objectUID    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// Envs the runner sets itself; a job policy may not override them.
var reservedEnv = map[string]bool{"POD_NAME": true, "POD_NAMESPACE": true, "POD_UID": true, "TF_IN_AUTOMATION": true, "TF_INPUT": true, "TF_DATA_DIR": true}

// ValidateTerraformCluster validates a create (old nil) or an update.
func ValidateTerraformCluster(obj, old *infrav1.TerraformCluster) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateAnnotations(obj.Annotations, true, names.Object{Kind: "tfc", Name: obj.Name})...)
	errs = append(errs, validateClusterSpec(&obj.Spec, field.NewPath("spec"))...)
	var oldWS *infrav1.WorkspaceSpec
	var oldDefaults *infrav1.JobPolicy
	if old != nil {
		oldWS, oldDefaults = &old.Spec.WorkspaceSpec, clusterDefaults(&old.Spec)
	}
	errs = append(errs, validateInline(&obj.Spec.WorkspaceSpec, oldWS, clusterDefaults(&obj.Spec), oldDefaults, field.NewPath("spec"))...)
	if old != nil && !old.Spec.ControlPlaneEndpoint.IsZero() && obj.Spec.ControlPlaneEndpoint != old.Spec.ControlPlaneEndpoint {
		// Cluster API copies the endpoint once; machines and kubeconfigs
		// point at it.
		errs = append(errs, field.Forbidden(field.NewPath("spec", "controlPlaneEndpoint"), "is immutable once set"))
	}
	return errs
}

// ValidateTerraformMachine validates a create (old nil) or an update. The
// providerID identity rule is the admission handler's: it needs the user.
func ValidateTerraformMachine(obj, old *infrav1.TerraformMachine) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateAnnotations(obj.Annotations, false, names.Object{Kind: "tfm", Name: obj.Name})...)
	oldID := ""
	if old != nil {
		oldID = old.Spec.ProviderID
	}
	errs = append(errs, validateMachineSpec(&obj.Spec, oldID, field.NewPath("spec"))...)
	var oldWS *infrav1.WorkspaceSpec
	if old != nil {
		oldWS = &old.Spec.WorkspaceSpec
	}
	errs = append(errs, validateInline(&obj.Spec.WorkspaceSpec, oldWS, nil, nil, field.NewPath("spec"))...)
	errs = append(errs, providerid.CheckImmutable(old, obj)...)
	return errs
}

// ValidateTerraformMachinePool validates a create (old nil) or an update.
func ValidateTerraformMachinePool(obj, old *infrav1.TerraformMachinePool) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateAnnotations(obj.Annotations, false, names.Object{Kind: "tfmp", Name: obj.Name})...)
	errs = append(errs, validateWorkspace(&obj.Spec.WorkspaceSpec, field.NewPath("spec"))...)
	var oldWS *infrav1.WorkspaceSpec
	if old != nil {
		oldWS = &old.Spec.WorkspaceSpec
	}
	errs = append(errs, validateInline(&obj.Spec.WorkspaceSpec, oldWS, nil, nil, field.NewPath("spec"))...)
	var oldIDs []string
	if old != nil {
		oldIDs = old.Spec.ProviderIDList
	}
	errs = append(errs, providerid.ValidateList(obj.Spec.ProviderIDList, oldIDs, field.NewPath("spec", "providerIDList"))...)
	return errs
}

// ValidateTerraformClusterTemplate validates a create (old nil) or an update.
func ValidateTerraformClusterTemplate(obj, old *infrav1.TerraformClusterTemplate) field.ErrorList {
	spec := field.NewPath("spec", "template", "spec")
	errs := validateClusterSpec(&obj.Spec.Template.Spec, spec)
	if old == nil {
		errs = append(errs, validateInline(&obj.Spec.Template.Spec.WorkspaceSpec, nil, clusterDefaults(&obj.Spec.Template.Spec), nil, spec)...)
	}
	errs = append(errs, validateTemplateMeta(&obj.Spec.Template.ObjectMeta, field.NewPath("spec", "template", "metadata"))...)
	if old != nil && !dryRun(obj) && !apiequality.Semantic.DeepEqual(obj.Spec, old.Spec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "a template is immutable: create a new template and point the Cluster (or ClusterClass) at it"))
	}
	return errs
}

// ValidateTerraformMachineTemplate validates a create (old nil) or an update.
func ValidateTerraformMachineTemplate(obj, old *infrav1.TerraformMachineTemplate) field.ErrorList {
	spec := field.NewPath("spec", "template", "spec")
	errs := validateMachineSpec(&obj.Spec.Template.Spec, "", spec)
	if old == nil {
		errs = append(errs, validateInline(&obj.Spec.Template.Spec.WorkspaceSpec, nil, nil, nil, spec)...)
	}
	if obj.Spec.Template.Spec.ProviderID != "" {
		errs = append(errs, field.Forbidden(spec.Child("providerID"), "a template cannot name a provider ID: each machine gets its own"))
	}
	errs = append(errs, validateTemplateMeta(&obj.Spec.Template.ObjectMeta, field.NewPath("spec", "template", "metadata"))...)
	for name, q := range obj.Spec.Capacity {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath("spec", "capacity").Key(string(name)), q.String(), "must not be negative"))
		}
	}
	if old != nil && !dryRun(obj) && !apiequality.Semantic.DeepEqual(obj.Spec, old.Spec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "a template is immutable: create a new template and point the MachineDeployment (or ClusterClass) at it"))
	}
	return errs
}

// ValidateTerraformMachinePoolTemplate validates a create (old nil) or an
// update.
func ValidateTerraformMachinePoolTemplate(obj, old *infrav1.TerraformMachinePoolTemplate) field.ErrorList {
	spec := field.NewPath("spec", "template", "spec")
	errs := validateWorkspace(&obj.Spec.Template.Spec.WorkspaceSpec, spec)
	if old == nil {
		errs = append(errs, validateInline(&obj.Spec.Template.Spec.WorkspaceSpec, nil, nil, nil, spec)...)
	}
	if len(obj.Spec.Template.Spec.ProviderIDList) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("providerIDList"), "a template cannot name provider IDs: each pool gets its own"))
	}
	errs = append(errs, validateTemplateMeta(&obj.Spec.Template.ObjectMeta, field.NewPath("spec", "template", "metadata"))...)
	if old != nil && !dryRun(obj) && !apiequality.Semantic.DeepEqual(obj.Spec, old.Spec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "a template is immutable: create a new template and point the ClusterClass at it"))
	}
	return errs
}

// validateProtect checks spec.protect's patterns: addresses as terraform
// prints them, where * is any run of characters.
func validateProtect(patterns []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, p := range patterns {
		switch {
		case strings.TrimSpace(p) != p || p == "":
			errs = append(errs, field.Invalid(path.Index(i), p, "a resource address pattern has no leading or trailing space"))
		case strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
			errs = append(errs, field.Invalid(path.Index(i), p, "a resource address pattern holds only printable characters"))
		}
	}
	return errs
}

func dryRun(obj metav1.Object) bool {
	_, ok := obj.GetAnnotations()[capi.DryRunAnnotation]
	return ok
}

func validateClusterSpec(spec *infrav1.TerraformClusterSpec, path *field.Path) field.ErrorList {
	errs := validateWorkspace(&spec.WorkspaceSpec, path)
	switch spec.ApprovalPolicy {
	case "", infrav1.ApprovalPolicyDestructive, infrav1.ApprovalPolicyManual:
	default:
		errs = append(errs, field.NotSupported(path.Child("approvalPolicy"), spec.ApprovalPolicy, []infrav1.ApprovalPolicy{infrav1.ApprovalPolicyDestructive, infrav1.ApprovalPolicyManual}))
	}
	errs = append(errs, validateProtect(spec.Protect, path.Child("protect"))...)
	if ep := spec.ControlPlaneEndpoint; !ep.IsZero() {
		if ep.Host == "" {
			errs = append(errs, field.Required(path.Child("controlPlaneEndpoint", "host"), "is required with a port"))
		}
		if ep.Port < 1 || ep.Port > 65535 {
			errs = append(errs, field.Invalid(path.Child("controlPlaneEndpoint", "port"), ep.Port, "must be between 1 and 65535"))
		}
	}
	if spec.Defaults != nil && spec.Defaults.Jobs != nil {
		errs = append(errs, validateJobPolicy(spec.Defaults.Jobs, path.Child("defaults", "jobs"))...)
	}
	return errs
}

func validateMachineSpec(spec *infrav1.TerraformMachineSpec, oldID string, path *field.Path) field.ErrorList {
	errs := validateWorkspace(&spec.WorkspaceSpec, path)
	if spec.ProviderID != "" {
		errs = append(errs, providerid.Validate(spec.ProviderID, oldID, path.Child("providerID"))...)
	}
	return errs
}

func validateTemplateMeta(m *infrav1.TemplateMeta, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range m.Labels {
		for _, msg := range utilvalidation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Child("labels").Key(k), k, msg))
		}
		for _, msg := range utilvalidation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child("labels").Key(k), v, msg))
		}
	}
	for k := range m.Annotations {
		for _, msg := range utilvalidation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(path.Child("annotations").Key(k), k, msg))
		}
	}
	return errs
}

// MaxInlineBytes bounds what an object holds inline: its variables' values
// and its Jobs' env values together (the inline module has the CRD's own
// bound, 64 KiB). The manager caches every object, and objects of the
// size the API admits (1.5 MiB) let one tenant fill its memory; larger
// values belong in a Secret or ConfigMap (valueFrom), read when a run
// starts, up to the inputs limit.
const MaxInlineBytes = 64 << 10

// inlineBytes is what ws holds inline, as MaxInlineBytes counts it.
func inlineBytes(ws *infrav1.WorkspaceSpec) int {
	n := 0
	for _, v := range ws.Variables {
		if v.Value != nil {
			n += len(v.Value.Raw)
		}
	}
	if ws.Jobs != nil {
		for _, e := range ws.Jobs.Env {
			n += len(e.Value)
		}
	}
	return n
}

// clusterDefaults is spec.defaults.jobs, nil when unset.
func clusterDefaults(spec *infrav1.TerraformClusterSpec) *infrav1.JobPolicy {
	if spec.Defaults == nil {
		return nil
	}
	return spec.Defaults.Jobs
}

// validateInline holds ws (and a cluster's defaults) to MaxInlineBytes. An
// object stored before the bound keeps working while what it holds inline
// does not grow (old: the stored spec, nil on create).
func validateInline(ws, old *infrav1.WorkspaceSpec, defaults, oldDefaults *infrav1.JobPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	grew := func(n int, was func() int) bool { return n > MaxInlineBytes && (old == nil || n > was()) }
	if n := inlineBytes(ws); grew(n, func() int { return inlineBytes(old) }) {
		errs = append(errs, field.Forbidden(path.Child("variables"), fmt.Sprintf("the values set inline (variables and jobs.env) take %d bytes, more than %d: keep large values in a Secret or ConfigMap (valueFrom), read when a run starts", n, MaxInlineBytes)))
	}
	if n := inlineBytes(&infrav1.WorkspaceSpec{Jobs: defaults}); grew(n, func() int { return inlineBytes(&infrav1.WorkspaceSpec{Jobs: oldDefaults}) }) {
		errs = append(errs, field.Forbidden(path.Child("defaults", "jobs", "env"), fmt.Sprintf("the values set inline take %d bytes, more than %d: keep large values in a Secret or ConfigMap (valueFrom)", n, MaxInlineBytes)))
	}
	return errs
}

// validateWorkspace checks what every kind that runs Terraform shares.
func validateWorkspace(ws *infrav1.WorkspaceSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateModule(&ws.Module, path.Child("module"))...)
	errs = append(errs, validateVariables(ws.Variables, path.Child("variables"))...)
	if ws.Jobs != nil {
		errs = append(errs, validateJobPolicy(ws.Jobs, path.Child("jobs"))...)
	}
	if d := ws.Drift; d != nil {
		if d.Interval != nil && (d.Interval.Duration < MinDriftInterval || d.Interval.Duration > MaxDriftInterval) {
			errs = append(errs, field.Invalid(path.Child("drift", "interval"), d.Interval.Duration.String(),
				fmt.Sprintf("must be between %s and %s", MinDriftInterval, MaxDriftInterval)))
		}
		switch d.Remediation {
		case "", infrav1.DriftRemediationNone, infrav1.DriftRemediationApply:
		default:
			errs = append(errs, field.NotSupported(path.Child("drift", "remediation"), d.Remediation, []infrav1.DriftRemediation{infrav1.DriftRemediationNone, infrav1.DriftRemediationApply}))
		}
	}
	return errs
}

func validateModule(m *infrav1.Module, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	set := 0
	for _, b := range []bool{m.Source != "", m.ConfigMap != nil, m.Inline != "", m.CatalogRef != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		errs = append(errs, field.Invalid(path, fmt.Sprintf("%d sources", set), "exactly one of source, configMap, inline or catalogRef must be set"))
	}
	if m.Source != "" && strings.TrimSpace(m.Source) != m.Source {
		errs = append(errs, field.Invalid(path.Child("source"), m.Source, "must not start or end with white space"))
	}
	if m.ConfigMap != nil {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(m.ConfigMap.Name) {
			errs = append(errs, field.Invalid(path.Child("configMap", "name"), m.ConfigMap.Name, msg))
		}
	}
	return errs
}

func validateVariables(vars []infrav1.Variable, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, v := range vars {
		p := path.Index(i)
		switch {
		case !variableName.MatchString(v.Name):
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, "must start with a letter or an underscore and hold only letters, digits, underscores and dashes (a Terraform variable name)"))
		case strings.HasPrefix(v.Name, "captf_"):
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, "names starting with captf_ are reserved for the inputs CAPTF provides"))
		case seen[v.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		seen[v.Name] = true
		if (v.Value != nil) == (v.ValueFrom != nil) {
			errs = append(errs, field.Invalid(p, v.Name, "exactly one of value or valueFrom must be set"))
		}
		if v.ValueFrom != nil {
			errs = append(errs, validateValueFrom(v.ValueFrom, p.Child("valueFrom"))...)
		}
	}
	return errs
}

func validateValueFrom(src *infrav1.VariableSource, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if (src.SecretKeyRef != nil) == (src.ConfigMapKeyRef != nil) {
		errs = append(errs, field.Invalid(path, "", "exactly one of secretKeyRef or configMapKeyRef must be set"))
	}
	check := func(p *field.Path, name, key string) {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, msg))
		}
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(p.Child("key"), key, msg))
		}
	}
	if ref := src.SecretKeyRef; ref != nil {
		check(path.Child("secretKeyRef"), ref.Name, ref.Key)
		if ref.Optional != nil && *ref.Optional {
			errs = append(errs, field.Forbidden(path.Child("secretKeyRef", "optional"), "a Terraform input cannot be optional: a missing value would plan with a default silently"))
		}
	}
	if ref := src.ConfigMapKeyRef; ref != nil {
		check(path.Child("configMapKeyRef"), ref.Name, ref.Key)
		if ref.Optional != nil && *ref.Optional {
			errs = append(errs, field.Forbidden(path.Child("configMapKeyRef", "optional"), "a Terraform input cannot be optional: a missing value would plan with a default silently"))
		}
	}
	switch src.Format {
	case "", infrav1.ValueFormatString, infrav1.ValueFormatJSON:
	default:
		errs = append(errs, field.NotSupported(path.Child("format"), src.Format, []infrav1.ValueFormat{infrav1.ValueFormatString, infrav1.ValueFormatJSON}))
	}
	return errs
}

func validateJobPolicy(jp *infrav1.JobPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r := jp.Resources; r != nil {
		errs = append(errs, validateResources(r, path.Child("resources"))...)
	}
	errs = append(errs, validateTimes(jp, path)...)
	for _, l := range []struct {
		name string
		v    *int32
	}{{"successfulJobsHistoryLimit", jp.SuccessfulJobsHistoryLimit}, {"failedJobsHistoryLimit", jp.FailedJobsHistoryLimit}} {
		if l.v != nil && *l.v < 0 {
			errs = append(errs, field.Invalid(path.Child(l.name), *l.v, "must be greater than or equal to 0"))
		}
	}
	errs = append(errs, validatePlacement(jp, path)...)
	errs = append(errs, validateEnv(jp.Env, path.Child("env"))...)
	for _, sa := range []struct{ field, name string }{{"serviceAccountName", jp.ServiceAccountName}, {"planServiceAccountName", jp.PlanServiceAccountName}} {
		if sa.name == "" {
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Subdomain(sa.name) {
			errs = append(errs, field.Invalid(path.Child(sa.field), sa.name, msg))
		}
	}
	return errs
}

// validateResources checks the runner's requests and limits: none
// negative, requests within limits, and memory enough for terraform.
func validateResources(r *corev1.ResourceRequirements, rp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range r.Requests {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(rp.Child("requests").Key(string(name)), q.String(), "must not be negative"))
		}
		if limit, ok := r.Limits[name]; ok && q.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(rp.Child("requests").Key(string(name)), q.String(), "must be less than or equal to the limit "+limit.String()))
		}
	}
	for name, q := range r.Limits {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(rp.Child("limits").Key(string(name)), q.String(), "must not be negative"))
		}
	}
	if mem, ok := r.Limits[corev1.ResourceMemory]; ok && mem.Cmp(resource.MustParse("64Mi")) < 0 {
		errs = append(errs, field.Invalid(rp.Child("limits").Key(string(corev1.ResourceMemory)), mem.String(), "must be at least 64Mi: terraform is killed below that"))
	}
	return errs
}

// validateTimes checks the Job's deadline and the lock timeout within it.
func validateTimes(jp *infrav1.JobPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if d := jp.ActiveDeadlineSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *d, "must be greater than 0"))
	}
	if lt := jp.LockTimeout; lt != nil {
		if lt.Duration <= 0 {
			errs = append(errs, field.Invalid(path.Child("lockTimeout"), lt.Duration.String(), "must be greater than 0"))
		}
		deadline := time.Hour // the default deadline
		if jp.ActiveDeadlineSeconds != nil {
			deadline = time.Duration(*jp.ActiveDeadlineSeconds) * time.Second
		}
		if lt.Duration >= deadline {
			errs = append(errs, field.Invalid(path.Child("lockTimeout"), lt.Duration.String(), fmt.Sprintf("must be shorter than the Job deadline (%s)", deadline)))
		}
	}
	return errs
}

// validatePlacement checks the runner pod's node selector and tolerations.
func validatePlacement(jp *infrav1.JobPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range jp.NodeSelector {
		for _, msg := range utilvalidation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Child("nodeSelector").Key(k), k, msg))
		}
		for _, msg := range utilvalidation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child("nodeSelector").Key(k), v, msg))
		}
	}
	for i, t := range jp.Tolerations {
		p := path.Child("tolerations").Index(i)
		if t.Operator == corev1.TolerationOpExists && t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty when operator is Exists"))
		}
		if t.Key != "" {
			for _, msg := range utilvalidation.IsQualifiedName(t.Key) {
				errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
			}
		}
	}
	return errs
}

// validateEnv checks the runner's environment: valid names, none twice,
// none the runner sets itself.
func validateEnv(env []corev1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, e := range env {
		p := path.Index(i)
		switch {
		case len(utilvalidation.IsEnvVarName(e.Name)) > 0:
			errs = append(errs, field.Invalid(p.Child("name"), e.Name, strings.Join(utilvalidation.IsEnvVarName(e.Name), "; ")))
		case reservedEnv[e.Name] || strings.HasPrefix(e.Name, "CAPTF_") || strings.HasPrefix(e.Name, "TF_VAR_captf_"):
			errs = append(errs, field.Forbidden(p.Child("name"), "is set by the runner"))
		case run.ForbiddenEnv(e.Name, e.Value, run.JobWorkDir) != "":
			errs = append(errs, field.Forbidden(p.Child("name"), run.ForbiddenEnv(e.Name, e.Value, run.JobWorkDir)))
		case seen[e.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), e.Name))
		}
		seen[e.Name] = true
	}
	return errs
}

// validateAnnotations checks the values of the captf.io/* annotations; gated
// says whether the kind takes plan approvals (clusters only).
func validateAnnotations(annotations map[string]string, gated bool, obj names.Object) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("metadata", "annotations")
	for _, key := range []string{infrav1.AnnotationApprovePlan, infrav1.AnnotationApproveDestructivePlan} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		if !gated {
			errs = append(errs, field.Forbidden(path.Key(key), "only a TerraformCluster's plans wait for approval: machines and pools are never gated"))
			continue
		}
		if !planHash.MatchString(v) {
			errs = append(errs, field.Invalid(path.Key(key), v, "must be a plan hash (16 lower-case hex digits) as status.lastPlan.hash shows it"))
		}
	}
	if v, ok := annotations[infrav1.AnnotationApproveModule]; ok {
		switch {
		case !gated:
			errs = append(errs, field.Forbidden(path.Key(infrav1.AnnotationApproveModule), "only a TerraformCluster's module code waits for approval: machines and pools are never gated"))
		case !moduleDigest.MatchString(v):
			errs = append(errs, field.Invalid(path.Key(infrav1.AnnotationApproveModule), v, "must be a module digest (sha256: and 64 lower-case hex digits) as the ModuleAwaitingApproval condition names it"))
		}
	}
	if v, ok := annotations[infrav1.AnnotationRestoreState]; ok {
		// A backup, or a state rescued from a run that could not save it.
		backup, rescue := obj.Backup(""), obj.Rescue("")
		stamp, found := strings.CutPrefix(v, backup)
		if !found {
			stamp, found = strings.CutPrefix(v, rescue)
		}
		if !found || !backupStamp.MatchString(stamp) {
			errs = append(errs, field.Invalid(path.Key(infrav1.AnnotationRestoreState), v, fmt.Sprintf("must name one of this object's state backups (%s<yyyymmdd-hhmmss> or %s<yyyymmdd-hhmmss>); list them with: kubectl get secrets -l %s=%s,%s=%s",
				backup, rescue, names.LabelSecretType, names.SecretTypeBackup, names.LabelObjectName, names.LabelValue(obj.Name))))
		}
	}
	if v, ok := annotations[infrav1.AnnotationAdoptState]; ok && !objectUID.MatchString(v) {
		errs = append(errs, field.Invalid(path.Key(infrav1.AnnotationAdoptState), v, "must be the UID of the object that left the state, as the ProtectionInherited condition names it"))
	}
	if v, ok := annotations[infrav1.AnnotationAbandonInfrastructure]; ok && v != "true" && v != "false" {
		errs = append(errs, field.Invalid(path.Key(infrav1.AnnotationAbandonInfrastructure), v, `must be "true" or "false"`))
	}
	return errs
}
