package plugin

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// object is a TerraformCluster, TerraformMachine or TerraformMachinePool.
type object interface {
	metav1.Object
	WorkspaceStatus() *infrav1.WorkspaceStatus
}

// kinds maps what a user may type to a kind and its resource.
var kinds = map[string]struct{ kind, resource string }{}

func init() {
	for _, k := range []struct{ short, kind, resource string }{
		{"tfc", "TerraformCluster", "terraformclusters"},
		{"tfm", "TerraformMachine", "terraformmachines"},
		{"tfmp", "TerraformMachinePool", "terraformmachinepools"},
	} {
		for _, alias := range []string{k.short, strings.ToLower(k.kind), k.resource, k.resource + "." + infrav1.SchemeGroupVersion.Group} {
			kinds[alias] = struct{ kind, resource string }{k.kind, k.resource}
		}
	}
}

// ref is a KIND/NAME the user named.
type ref struct{ kind, resource, name string }

func parseRef(s string) (ref, error) {
	k, name, ok := strings.Cut(s, "/")
	kind, known := kinds[strings.ToLower(k)]
	if !ok || !known || name == "" {
		return ref{}, usageError{fmt.Sprintf("%q is no KIND/NAME of a Terraform object (KIND: tfc, tfm or tfmp)", s)}
	}
	return ref{kind.kind, kind.resource, name}, nil
}

func (r ref) String() string { return r.resource + "/" + r.name }

// lookup reads the object arg (KIND/NAME) names.
func (e *env) lookup(arg string) (ref, object, error) {
	r, err := parseRef(arg)
	if err != nil {
		return r, nil, err
	}
	obj, err := e.get(r)
	return r, obj, err
}

// get reads the object r names.
func (e *env) get(r ref) (object, error) {
	c := e.captf.InfrastructureV1alpha1()
	switch r.kind {
	case "TerraformCluster":
		return c.TerraformClusters(e.namespace).Get(e.ctx, r.name, metav1.GetOptions{})
	case "TerraformMachine":
		return c.TerraformMachines(e.namespace).Get(e.ctx, r.name, metav1.GetOptions{})
	default:
		return c.TerraformMachinePools(e.namespace).Get(e.ctx, r.name, metav1.GetOptions{})
	}
}

// record is one run record, read.
type record struct {
	name string
	run.Record
	created metav1.Time
	data    map[string]string
	binary  map[string][]byte
	// vouched: the object's status names the record with the digest its
	// data still has (the manager's word that its runner wrote it as it
	// is). Anyone who may write ConfigMaps can make a look-alike.
	vouched bool
}

// records lists the object's run records, newest first: those its
// runners wrote, owned by the object (a look-alike someone else made is
// not the object's).
func (e *env) records(r ref, obj object) ([]record, error) {
	list, err := e.kube.CoreV1().ConfigMaps(e.namespace).List(e.ctx, metav1.ListOptions{
		LabelSelector: labels.Set(names.RecordLabels(names.ObjectOf(r.kind, r.name))).String()})
	if err != nil {
		return nil, err
	}
	var out []record
	for _, cm := range list.Items {
		if names.OwnedBy(&cm, obj.GetUID()) {
			rec := recordOf(&cm)
			rec.vouched = vouched(obj.WorkspaceStatus(), rec)
			out = append(out, rec)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].created.Equal(&out[j].created) {
			return out[j].created.Before(&out[i].created)
		}
		return out[i].name > out[j].name
	})
	return out, nil
}

func recordOf(cm *corev1.ConfigMap) record {
	r := record{name: cm.Name, created: cm.CreationTimestamp, data: cm.Data, binary: cm.BinaryData}
	if err := json.Unmarshal([]byte(cm.Data[run.KeyRun]), &r.Record); err != nil || r.Job == "" {
		r.Job = strings.TrimSuffix(cm.Name, "-run")
		r.Operation = infrav1.Operation(cm.Labels[names.LabelOperation])
		r.Outcome = cm.Labels[names.LabelOutcome]
	}
	return r
}

// planJSON is the record's plan as JSON, unzipped.
func (r record) planJSON() ([]byte, error) {
	gz, ok := r.binary[run.KeyPlanJSON]
	if !ok {
		return nil, fmt.Errorf("run %s keeps no plan JSON (it was over %d KiB gzipped, or the run made no plan)", r.Job, run.MaxPlanJSONGzip>>10)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("plan JSON of run %s: %w", r.Job, err)
	}
	return io.ReadAll(io.LimitReader(zr, 64<<20))
}

// planRecord finds the newest vouched record of the run that made plan, as
// the object's status (which only the manager writes) summarizes it.
func planRecord(records []record, plan *infrav1.PlanStatus) (record, bool) {
	for _, r := range records {
		if r.vouched && r.Plan != nil && r.Plan.Hash == plan.Hash && equality.Semantic.DeepEqual(r.Plan.Summary, plan.Summary) {
			return r, true
		}
	}
	return record{}, false
}

// vouched tells whether st names rec, with the digest of its data: the
// record of the last run of each operation, or of the last apply.
// Only a record the status names is hashed: the others (most, and the
// look-alikes) are not read through.
func vouched(st *infrav1.WorkspaceStatus, rec record) bool {
	want := ""
	if st.AppliedRecord == rec.name {
		want = st.AppliedRecordDigest
	}
	for _, j := range st.LastJobs {
		if j.Record == rec.name {
			want = j.RecordDigest
		}
	}
	return want != "" && want == run.RecordDigest(rec.data, rec.binary)
}

func condition(obj object, t string) *metav1.Condition {
	for i, c := range obj.WorkspaceStatus().Conditions {
		if c.Type == t {
			return &obj.WorkspaceStatus().Conditions[i]
		}
	}
	return nil
}
