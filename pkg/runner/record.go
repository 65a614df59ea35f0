package runner

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/retry"
	"github.com/captf/captf/pkg/run"
)

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) tail() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf), t.cut
}

// writeRecord keeps what the run planned and logged in its run record, for
// people and tools once the pod is gone. A clean drift check keeps none: the
// status says all it found. Failing to keep one fails nothing the run did.
func (r *Runner) writeRecord(ctx context.Context, res *run.Result, finished metav1.Time) {
	if res.Operation == infrav1.OperationDrift && res.Outcome == run.OutcomeSucceeded && (res.Plan == nil || !res.Plan.HasChanges()) {
		return
	}
	cm, err := r.record(res, finished)
	if err == nil {
		err = retry.Transiently(ctx, func() error {
			_, err := r.Client.CoreV1().ConfigMaps(r.Config.Namespace).Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// This pod's (an answer was lost, and the create retried),
				// or one made under its name: the digest tells.
				return nil
			}
			return err
		})
	}
	if err == nil {
		res.Record, res.RecordDigest = cm.Name, run.RecordDigest(cm.Data, cm.BinaryData)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Keeping the run's record; its plan and log are only in this pod's log", "configMap", klog.KRef(r.Config.Namespace, r.obj.RunRecord(r.Config.Job, r.Config.PodUID)))
	}
}

// record is the run record of res.
func (r *Runner) record(res *run.Result, finished metav1.Time) (*corev1.ConfigMap, error) {
	rec := run.Record{Job: r.Config.Job, Operation: res.Operation, Outcome: res.Outcome, Started: res.Started, Finished: &finished,
		Stage: res.Stage, Reason: res.Reason, Error: res.Error, Plan: res.Plan, Module: res.Module}
	data := map[string]string{}
	var binary map[string][]byte
	if text := r.planText; text != "" {
		if len(text) > run.MaxPlanText {
			text = text[:run.MaxPlanText] + fmt.Sprintf("\n... (%d bytes more: see plan.json.gz)\n", len(text)-run.MaxPlanText)
			rec.Cut = append(rec.Cut, run.KeyPlanText)
		}
		data[run.KeyPlanText] = text
	}
	if r.planJSON != nil {
		redacted, err := r.redactPlanJSON(r.planJSON)
		if err != nil {
			return nil, fmt.Errorf("redacting the plan's JSON: %w", err)
		}
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		_, _ = w.Write(redacted)
		if err := w.Close(); err != nil {
			return nil, err
		}
		if gz.Len() > run.MaxPlanJSONGzip {
			rec.Cut = append(rec.Cut, run.KeyPlanJSON)
		} else {
			binary = map[string][]byte{run.KeyPlanJSON: gz.Bytes()}
		}
	}
	if r.tail != nil {
		log, cut := r.tail.tail()
		if cut {
			rec.Cut = append(rec.Cut, run.KeyLog)
		}
		data[run.KeyLog] = string(bytes.ToValidUTF8(log, nil))
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	data[run.KeyRun] = string(b)
	labels := names.ObjectLabels(r.Config.ObjectKind, r.Config.ObjectName, r.Config.ObjectUID)
	labels[names.LabelRunRecord] = "true"
	labels[names.LabelOperation] = string(res.Operation)
	labels[names.LabelOutcome] = res.Outcome
	owner := metav1.OwnerReference{APIVersion: r.Config.ObjectAPIVersion, Kind: r.Config.ObjectKind, Name: r.Config.ObjectName, UID: r.Config.ObjectUID}
	immutable := true // what the manager verified stays what it was
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: r.obj.RunRecord(r.Config.Job, r.Config.PodUID), Namespace: r.Config.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Data:       data, BinaryData: binary, Immutable: &immutable,
	}, nil
}

// planJSONKeys are what a record keeps of `terraform show -json`: what
// policy (conftest, OPA) and cost (infracost) tools read of a plan. The
// prior state and the configuration are left out: values there carry no
// sensitivity marks to redact by.
var planJSONKeys = []string{"format_version", "terraform_version", "applyable", "complete", "errored", "timestamp",
	"resource_changes", "resource_drift", "output_changes", "planned_values", "deferred_changes"}

// redactPlanJSON is the plan's JSON with every value terraform marks
// sensitive replaced, and then every sensitive input's value.
func (r *Runner) redactPlanJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var plan map[string]any
	if err := dec.Decode(&plan); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, k := range planJSONKeys {
		if v, ok := plan[k]; ok {
			out[k] = v
		}
	}
	for _, k := range []string{"resource_changes", "resource_drift", "deferred_changes"} {
		list, _ := out[k].([]any)
		for _, item := range list {
			rc, _ := item.(map[string]any)
			if k == "deferred_changes" {
				rc, _ = rc["resource_change"].(map[string]any)
			}
			if c, ok := rc["change"].(map[string]any); ok {
				maskChange(c)
			}
		}
	}
	if oc, ok := out["output_changes"].(map[string]any); ok {
		for _, c := range oc {
			if c, ok := c.(map[string]any); ok {
				maskChange(c)
			}
		}
	}
	if pv, ok := out["planned_values"].(map[string]any); ok {
		maskValues(pv)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return []byte(r.redact.String(string(b))), nil
}

// maskChange masks a change's values before and after by their marks.
func maskChange(c map[string]any) {
	c["before"] = mask(c["before"], c["before_sensitive"])
	c["after"] = mask(c["after"], c["after_sensitive"])
	// Configuration terraform generated for an import: its values carry
	// no marks.
	delete(c, "generated_config")
}

// maskValues masks planned_values: outputs marked sensitive, and each
// resource's values by its sensitive_values, in every module.
func maskValues(values map[string]any) {
	if outputs, ok := values["outputs"].(map[string]any); ok {
		for _, o := range outputs {
			if o, ok := o.(map[string]any); ok && o["sensitive"] == true {
				o["value"] = Redacted
			}
		}
	}
	var module func(m map[string]any)
	module = func(m map[string]any) {
		resources, _ := m["resources"].([]any)
		for _, res := range resources {
			if res, ok := res.(map[string]any); ok {
				res["values"] = mask(res["values"], res["sensitive_values"])
			}
		}
		children, _ := m["child_modules"].([]any)
		for _, c := range children {
			if c, ok := c.(map[string]any); ok {
				module(c)
			}
		}
	}
	if root, ok := values["root_module"].(map[string]any); ok {
		module(root)
	}
}

// mask replaces what marks (terraform's sensitivity marks: true, or an
// object or array shaped like v) marks sensitive in v.
func mask(v, marks any) any {
	switch m := marks.(type) {
	case bool:
		if m && v != nil {
			return Redacted
		}
	case map[string]any:
		if vm, ok := v.(map[string]any); ok {
			for k, mk := range m {
				if _, ok := vm[k]; ok {
					vm[k] = mask(vm[k], mk)
				}
			}
		}
	case []any:
		if va, ok := v.([]any); ok {
			for i := range min(len(va), len(m)) {
				va[i] = mask(va[i], m[i])
			}
		}
	}
	return v
}
