package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
)

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	ns, err := plane.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func inlineModule() infrav1.WorkspaceSpec {
	return infrav1.WorkspaceSpec{
		Module:    infrav1.Module{Inline: `output "x" { value = 1 }`},
		Variables: []infrav1.Variable{{Name: "region", Value: &runtime.RawExtension{Raw: []byte(`"eu-1"`)}}},
	}
}

// TestRoundTrip creates each kind through the generated clientset, reads it
// back, writes its status and waits for the generated informers to see it.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := plane.Captf.InfrastructureV1alpha1()
	factory := externalversions.NewSharedInformerFactoryWithOptions(plane.Captf, 0, externalversions.WithNamespace(ns))
	infs := factory.Infrastructure().V1alpha1()
	clusters, clusterTemplates := infs.TerraformClusters().Lister(), infs.TerraformClusterTemplates().Lister()
	machines, machineTemplates := infs.TerraformMachines().Lister(), infs.TerraformMachineTemplates().Lister()
	pools, poolTemplates := infs.TerraformMachinePools().Lister(), infs.TerraformMachinePoolTemplates().Lister()
	listers := map[string]func(name string) (any, error){
		"TerraformCluster":         func(n string) (any, error) { return clusters.TerraformClusters(ns).Get(n) },
		"TerraformClusterTemplate": func(n string) (any, error) { return clusterTemplates.TerraformClusterTemplates(ns).Get(n) },
		"TerraformMachine":         func(n string) (any, error) { return machines.TerraformMachines(ns).Get(n) },
		"TerraformMachineTemplate": func(n string) (any, error) { return machineTemplates.TerraformMachineTemplates(ns).Get(n) },
		"TerraformMachinePool":     func(n string) (any, error) { return pools.TerraformMachinePools(ns).Get(n) },
		"TerraformMachinePoolTemplate": func(n string) (any, error) {
			return poolTemplates.TerraformMachinePoolTemplates(ns).Get(n)
		},
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	provisioned := true
	tests := map[string]func() (name string, check func() error, err error){
		"TerraformCluster": func() (string, func() error, error) {
			obj, err := c.TerraformClusters(ns).Create(ctx, &infrav1.TerraformCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "c"},
				Spec:       infrav1.TerraformClusterSpec{WorkspaceSpec: inlineModule()},
			}, metav1.CreateOptions{})
			if err != nil {
				return "", nil, err
			}
			if obj.Spec.ApprovalPolicy != infrav1.ApprovalPolicyDestructive {
				return "", nil, fmt.Errorf("approvalPolicy defaulted to %q, want Destructive", obj.Spec.ApprovalPolicy)
			}
			obj.Status.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
			obj.Status.FailureDomains = []infrav1.FailureDomain{{Name: "a", ControlPlane: &provisioned}}
			obj.Status.Outputs = map[string]runtime.RawExtension{"x": {Raw: []byte(`{"a":[1,2]}`)}}
			if _, err := c.TerraformClusters(ns).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return "", nil, err
			}
			return "c", func() error {
				got, err := c.TerraformClusters(ns).Get(ctx, "c", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if got.Status.Initialization == nil || !*got.Status.Initialization.Provisioned || len(got.Status.FailureDomains) != 1 ||
					string(got.Status.Outputs["x"].Raw) != `{"a":[1,2]}` || string(got.Spec.Variables[0].Value.Raw) != `"eu-1"` {
					return fmt.Errorf("status or spec did not round-trip: %+v", got)
				}
				return nil
			}, nil
		},
		"TerraformClusterTemplate": func() (string, func() error, error) {
			_, err := c.TerraformClusterTemplates(ns).Create(ctx, &infrav1.TerraformClusterTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "ct"},
				Spec: infrav1.TerraformClusterTemplateSpec{Template: infrav1.TerraformClusterTemplateResource{
					ObjectMeta: infrav1.TemplateMeta{Labels: map[string]string{"a": "b"}},
					Spec:       infrav1.TerraformClusterSpec{WorkspaceSpec: inlineModule()},
				}},
			}, metav1.CreateOptions{})
			return "ct", func() error {
				got, err := c.TerraformClusterTemplates(ns).Get(ctx, "ct", metav1.GetOptions{})
				if err == nil && got.Spec.Template.ObjectMeta.Labels["a"] != "b" {
					err = fmt.Errorf("template metadata lost: %+v", got.Spec.Template)
				}
				return err
			}, err
		},
		"TerraformMachine": func() (string, func() error, error) {
			obj, err := c.TerraformMachines(ns).Create(ctx, &infrav1.TerraformMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "m"},
				Spec:       infrav1.TerraformMachineSpec{WorkspaceSpec: inlineModule(), ProviderID: "local:///m"},
			}, metav1.CreateOptions{})
			if err != nil {
				return "", nil, err
			}
			obj.Status.Addresses = []infrav1.MachineAddress{{Type: "InternalIP", Address: "10.0.0.5"}}
			obj.Status.FailureDomain = "a"
			obj.Status.Ready = true
			if _, err := c.TerraformMachines(ns).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return "", nil, err
			}
			return "m", func() error {
				got, err := c.TerraformMachines(ns).Get(ctx, "m", metav1.GetOptions{})
				if err == nil && (got.Status.FailureDomain != "a" || len(got.Status.Addresses) != 1 || !got.Status.Ready) {
					err = fmt.Errorf("status did not round-trip: %+v", got.Status)
				}
				return err
			}, nil
		},
		"TerraformMachineTemplate": func() (string, func() error, error) {
			obj, err := c.TerraformMachineTemplates(ns).Create(ctx, &infrav1.TerraformMachineTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "mt"},
				Spec: infrav1.TerraformMachineTemplateSpec{
					Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: inlineModule()}},
					Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return "", nil, err
			}
			obj.Status.Capacity = obj.Spec.Capacity
			obj.Status.NodeInfo = &infrav1.NodeInfo{Architecture: "arm64", OperatingSystem: "linux"}
			if _, err := c.TerraformMachineTemplates(ns).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return "", nil, err
			}
			return "mt", func() error {
				got, err := c.TerraformMachineTemplates(ns).Get(ctx, "mt", metav1.GetOptions{})
				if err == nil && (got.Status.NodeInfo == nil || got.Status.Capacity.Cpu().String() != "2") {
					err = fmt.Errorf("status did not round-trip: %+v", got.Status)
				}
				return err
			}, nil
		},
		"TerraformMachinePoolTemplate": func() (string, func() error, error) {
			_, err := c.TerraformMachinePoolTemplates(ns).Create(ctx, &infrav1.TerraformMachinePoolTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "mpt"},
				Spec: infrav1.TerraformMachinePoolTemplateSpec{
					Template: infrav1.TerraformMachinePoolTemplateResource{Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: inlineModule()}}},
			}, metav1.CreateOptions{})
			return "mpt", func() error { return nil }, err
		},
		"TerraformMachinePool": func() (string, func() error, error) {
			obj, err := c.TerraformMachinePools(ns).Create(ctx, &infrav1.TerraformMachinePool{
				ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec:       infrav1.TerraformMachinePoolSpec{WorkspaceSpec: inlineModule(), ProviderIDList: []string{"local:///a", "local:///b"}},
			}, metav1.CreateOptions{})
			if err != nil {
				return "", nil, err
			}
			obj.Status.Replicas = 2
			obj.Status.Ready = true
			obj.Status.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
			if _, err := c.TerraformMachinePools(ns).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return "", nil, err
			}
			return "p", func() error {
				got, err := c.TerraformMachinePools(ns).Get(ctx, "p", metav1.GetOptions{})
				if err == nil && (got.Status.Replicas != 2 || !got.Status.Ready || len(got.Spec.ProviderIDList) != 2) {
					err = fmt.Errorf("pool did not round-trip: %+v", got)
				}
				return err
			}, nil
		},
	}
	for kind, create := range tests {
		t.Run(kind, func(t *testing.T) {
			name, check, err := create()
			if err != nil {
				t.Fatal(err)
			}
			if err := check(); err != nil {
				t.Fatal(err)
			}
			err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				_, err := listers[kind](name)
				return err == nil, nil
			})
			if err != nil {
				t.Fatalf("the informer never saw %s %s", kind, name)
			}
		})
	}
}

// TestValidation sends bad objects and checks the API server refuses them
// with a message that names the field.
func TestValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tests := map[string]struct {
		spec string // spec of a TerraformCluster, as JSON
		want []string
	}{
		"no module": {
			spec: `{}`,
			want: []string{"spec.module: Required value"},
		},
		"empty module": {
			spec: `{"module":{}}`,
			want: []string{"spec.module: Invalid value", "exactly one of source, configMap, inline or catalogRef must be set"},
		},
		"two module sources": {
			spec: `{"module":{"source":"git::https://example.com/m.git","inline":"x"}}`,
			want: []string{"spec.module: Invalid value", "exactly one of source, configMap, inline or catalogRef must be set"},
		},
		"a catalog module beside an inline one": {
			spec: `{"module":{"inline":"x","catalogRef":{"name":"vpc","version":"v1"}}}`,
			want: []string{"spec.module: Invalid value", "exactly one of source, configMap, inline or catalogRef must be set"},
		},
		"port out of range": {
			spec: `{"module":{"inline":"x"},"controlPlaneEndpoint":{"host":"a","port":70000}}`,
			want: []string{"spec.controlPlaneEndpoint.port: Invalid value: 70000", "less than or equal to 65535"},
		},
		"negative history limit": {
			spec: `{"module":{"inline":"x"},"jobs":{"failedJobsHistoryLimit":-1}}`,
			want: []string{"spec.jobs.failedJobsHistoryLimit: Invalid value: -1", "greater than or equal to 0"},
		},
		"bad variable name": {
			spec: `{"module":{"inline":"x"},"variables":[{"name":"1bad name","value":1}]}`,
			want: []string{"spec.variables[0].name: Invalid value: \"1bad name\"", "should match"},
		},
		"reserved variable name": {
			spec: `{"module":{"inline":"x"},"variables":[{"name":"captf_cluster_name","value":"x"}]}`,
			want: []string{"spec.variables[0].name", "reserved for the inputs CAPTF provides"},
		},
		"duplicate variable": {
			spec: `{"module":{"inline":"x"},"variables":[{"name":"a","value":1},{"name":"a","value":2}]}`,
			want: []string{"spec.variables[1]: Duplicate value"},
		},
		"valueFrom with two sources": {
			spec: `{"module":{"inline":"x"},"variables":[{"name":"a","valueFrom":{"secretKeyRef":{"name":"s","key":"k"},"configMapKeyRef":{"name":"c","key":"k"}}}]}`,
			want: []string{"spec.variables[0].valueFrom", "exactly one of secretKeyRef or configMapKeyRef must be set"},
		},
		"lock timeout not a duration": {
			spec: `{"module":{"inline":"x"},"jobs":{"lockTimeout":"5 minutes"}}`,
			want: []string{"spec.jobs.lockTimeout: Invalid value: \"5 minutes\""},
		},
		"lock timeout longer than the deadline": {
			spec: `{"module":{"inline":"x"},"jobs":{"lockTimeout":"10m","activeDeadlineSeconds":60}}`,
			want: []string{"spec.jobs", "lockTimeout must be shorter than activeDeadlineSeconds"},
		},
		"drift interval too long": {
			spec: `{"module":{"inline":"x"},"drift":{"interval":"200h"}}`,
			want: []string{"spec.drift.interval", "must be between 1s and 168h"},
		},
		"unknown approval policy": {
			spec: `{"module":{"inline":"x"},"approvalPolicy":"Sometimes"}`,
			want: []string{"spec.approvalPolicy: Unsupported value: \"Sometimes\""},
		},
		"negative default deadline": {
			spec: `{"module":{"inline":"x"},"defaults":{"jobs":{"activeDeadlineSeconds":0}}}`,
			want: []string{"spec.defaults.jobs.activeDeadlineSeconds: Invalid value: 0"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			body := fmt.Sprintf(`{"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","kind":"TerraformCluster","metadata":{"name":"bad","namespace":%q},"spec":%s}`, ns, tc.spec)
			err := plane.Captf.InfrastructureV1alpha1().RESTClient().Post().
				Namespace(ns).Resource("terraformclusters").Body([]byte(body)).Do(ctx).Error()
			if err == nil {
				t.Fatalf("created, want refused")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	t.Run("providerID is immutable", func(t *testing.T) {
		m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "pid"},
			Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: inlineModule(), ProviderID: "local:///a"}}
		m, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, m, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Spec.ProviderID = "local:///b"
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Update(ctx, m, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "spec.providerID: Invalid value") || !strings.Contains(err.Error(), "providerID is immutable once set") {
			t.Fatalf("update error = %v, want providerID is immutable", err)
		}
	})
}

// TestPrinterColumns reads each kind through the server's Table API, as
// kubectl get does, and checks the columns a user sees.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := plane.Captf.InfrastructureV1alpha1()
	ws := inlineModule()
	mustCreate := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"cluster.x-k8s.io/cluster-name": "prod"}
	mustCreate(c.TerraformClusters(ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: labels},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: ws, ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "api.example.com", Port: 6443}}}, metav1.CreateOptions{}))
	mustCreate(c.TerraformClusterTemplates(ns).Create(ctx, &infrav1.TerraformClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ct"},
		Spec: infrav1.TerraformClusterTemplateSpec{Template: infrav1.TerraformClusterTemplateResource{Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: ws}}}}, metav1.CreateOptions{}))
	m, err := c.TerraformMachines(ns).Create(ctx, &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Labels: labels},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: ws, ProviderID: "local:///vm-1"}}, metav1.CreateOptions{})
	mustCreate(m, err)
	provisioned := true
	m.Status.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
	m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Applied", LastTransitionTime: metav1.Now()}}
	mustCreate(c.TerraformMachines(ns).UpdateStatus(ctx, m, metav1.UpdateOptions{}))
	mustCreate(c.TerraformMachineTemplates(ns).Create(ctx, &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mt"},
		Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: ws}}}}, metav1.CreateOptions{}))
	mustCreate(c.TerraformMachinePools(ns).Create(ctx, &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels},
		Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: ws}}, metav1.CreateOptions{}))
	mustCreate(c.TerraformMachinePoolTemplates(ns).Create(ctx, &infrav1.TerraformMachinePoolTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mpt"},
		Spec: infrav1.TerraformMachinePoolTemplateSpec{Template: infrav1.TerraformMachinePoolTemplateResource{Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: ws}}}}, metav1.CreateOptions{}))

	tests := map[string]struct {
		columns []string
		cells   map[string]any // column -> value in the first row
	}{
		"terraformclusters": {
			columns: []string{"Name", "Cluster", "Ready", "Provisioned", "Endpoint", "Reason", "Plan", "Drifted", "Age"},
			cells:   map[string]any{"Cluster": "prod", "Endpoint": "api.example.com"},
		},
		"terraformclustertemplates": {columns: []string{"Name", "Age"}},
		"terraformmachines": {
			columns: []string{"Name", "Cluster", "Ready", "Provisioned", "ProviderID", "Reason", "Machine", "Drifted", "Age"},
			cells:   map[string]any{"ProviderID": "local:///vm-1", "Ready": "True", "Provisioned": true, "Reason": "Applied"},
		},
		"terraformmachinetemplates":     {columns: []string{"Name", "CPU", "Memory", "Age"}},
		"terraformmachinepools":         {columns: []string{"Name", "Cluster", "Replicas", "Ready", "Provisioned", "Reason", "Drifted", "Age"}},
		"terraformmachinepooltemplates": {columns: []string{"Name", "Age"}},
	}
	for resource, tc := range tests {
		t.Run(resource, func(t *testing.T) {
			raw, err := c.RESTClient().Get().Namespace(ns).Resource(resource).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var table metav1.Table
			if err := json.Unmarshal(raw, &table); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, col := range table.ColumnDefinitions {
				got = append(got, col.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.columns, ",") {
				t.Fatalf("columns = %v, want %v", got, tc.columns)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("got %d rows, want 1", len(table.Rows))
			}
			for col, want := range tc.cells {
				i := indexOf(got, col)
				if table.Rows[0].Cells[i] != want {
					t.Errorf("column %s = %v, want %v", col, table.Rows[0].Cells[i], want)
				}
			}
		})
	}

	t.Run("short names and categories", func(t *testing.T) {
		_, lists, err := plane.Kube.Discovery().ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"terraformclusters": "tfc", "terraformclustertemplates": "tfct", "terraformmachines": "tfm",
			"terraformmachinetemplates": "tfmt", "terraformmachinepools": "tfmp", "terraformmachinepooltemplates": "tfmpt"}
		for _, l := range lists {
			if l.GroupVersion != infrav1.SchemeGroupVersion.String() {
				continue
			}
			for _, r := range l.APIResources {
				short, ok := want[r.Name]
				if !ok {
					continue
				}
				if strings.Join(r.ShortNames, ",") != short || strings.Join(r.Categories, ",") != "cluster-api,captf" {
					t.Errorf("%s: shortNames %v categories %v", r.Name, r.ShortNames, r.Categories)
				}
				delete(want, r.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("not served: %v", want)
		}
	})
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
