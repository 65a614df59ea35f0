package providerid

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

func machine(name, cluster, id string) *infrav1.TerraformMachine {
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("m-" + name)}}
	if cluster != "" {
		tm.Labels = map[string]string{capi.ClusterNameLabel: cluster}
	}
	tm.Spec.ProviderID = id
	return tm
}

func pool(name, cluster string, ids ...string) *infrav1.TerraformMachinePool {
	tmp := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("p-" + name)}}
	if cluster != "" {
		tmp.Labels = map[string]string{capi.ClusterNameLabel: cluster}
	}
	tmp.Spec.ProviderIDList = ids
	return tmp
}

func TestValidate(t *testing.T) {
	for id, want := range map[string]string{
		"aws:///eu-west-1a/i-0123": "", "local:///m": "", "p://1": "",
		"i-0123": "must look like", "://x": "must look like", "p://": "must look like", "": "must look like",
		"p://1\n└─Machine/forged  True": "spaces or control characters", "p://\x1b[2J1": "spaces or control characters",
		"p://a b": "spaces or control characters", "p://\u202e1": "spaces or control characters",
	} {
		if got := Invalid(id); !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Errorf("Invalid(%q) = %q, want %q", id, got, want)
		}
	}
	errs := ValidateList([]string{"p://1", "p://1", "x"}, nil, field.NewPath("spec", "providerIDList"))
	if got := errs.ToAggregate().Error(); !strings.Contains(got, "spec.providerIDList[1]: Duplicate value") || !strings.Contains(got, `spec.providerIDList[2]: Invalid value: "x"`) {
		t.Errorf("ValidateList = %s", got)
	}
	// A ratchet: IDs held before the rules were tightened stay, new ones
	// are checked.
	held := "p://1\nx"
	if errs := ValidateList([]string{held, "p://2"}, []string{held}, field.NewPath("ids")); len(errs) != 0 {
		t.Errorf("a pool's held ID refused: %v", errs)
	}
	if errs := ValidateList([]string{held, "p://2\n"}, []string{held}, field.NewPath("ids")); len(errs) != 1 {
		t.Errorf("a pool's new bad ID: %v, want one error", errs)
	}
	if errs := Validate(held, held, field.NewPath("id")); len(errs) != 0 {
		t.Errorf("a machine's held ID refused: %v", errs)
	}
	if errs := Validate(held, "", field.NewPath("id")); len(errs) != 1 {
		t.Errorf("a machine's new bad ID: %v, want one error", errs)
	}
}

// TestWrites: which writes set provider IDs (the manager's alone), which
// change a machine's once set (nobody's), and which move an object that
// holds them to another Cluster (the manager's alone).
func TestWrites(t *testing.T) {
	tests := map[string]struct {
		old, obj                 any
		sets, immutable, relabel bool
	}{
		"a machine created without one":              {obj: machine("m", "c", "")},
		"a machine created with one (a restore)":     {obj: machine("m", "c", "p://1"), sets: true},
		"a machine given its first":                  {old: machine("m", "c", ""), obj: machine("m", "c", "p://1"), sets: true},
		"a machine's changed":                        {old: machine("m", "c", "p://1"), obj: machine("m", "c", "p://2"), sets: true, immutable: true},
		"a machine's removed":                        {old: machine("m", "c", "p://1"), obj: machine("m", "c", ""), sets: true, immutable: true},
		"a machine's kept":                           {old: machine("m", "c", "p://1"), obj: machine("m", "c", "p://1")},
		"a machine holding one, to another Cluster":  {old: machine("m", "c", "p://1"), obj: machine("m", "d", "p://1"), relabel: true},
		"a machine holding one, label removed":       {old: machine("m", "c", "p://1"), obj: machine("m", "", "p://1"), relabel: true},
		"a machine holding none, to another Cluster": {old: machine("m", "c", ""), obj: machine("m", "d", "")},
		"a machine holding one, its first label":     {old: machine("m", "", "p://1"), obj: machine("m", "c", "p://1")},
		"a pool created with some":                   {obj: pool("p", "c", "p://1"), sets: true},
		"a pool's grown":                             {old: pool("p", "c", "p://1"), obj: pool("p", "c", "p://1", "p://2"), sets: true},
		"a pool's kept":                              {old: pool("p", "c", "p://1"), obj: pool("p", "c", "p://1")},
		"a pool holding some, to another Cluster":    {old: pool("p", "c", "p://1"), obj: pool("p", "d", "p://1"), relabel: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Sets(tc.old, tc.obj); got != tc.sets {
				t.Errorf("Sets = %v, want %v", got, tc.sets)
			}
			if m, ok := tc.obj.(*infrav1.TerraformMachine); ok {
				old, _ := tc.old.(*infrav1.TerraformMachine)
				if got := len(CheckImmutable(old, m)) > 0; got != tc.immutable {
					t.Errorf("CheckImmutable refused = %v, want %v", got, tc.immutable)
				}
			}
			if tc.old != nil {
				if got := Relabels(tc.old.(metav1.Object), tc.obj.(metav1.Object)); got != tc.relabel {
					t.Errorf("Relabels = %v, want %v", got, tc.relabel)
				}
			}
		})
	}
}

// TestHeldElsewhere: an ID held by another object of the namespace, in a
// machine or a pool, is refused with its holder named; the object's own,
// another namespace's and a new one are not; an ID output twice is.
func TestHeldElsewhere(t *testing.T) {
	machines := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{Index: IndexFunc})
	pools := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{Index: IndexFunc})
	self := machine("self", "c", "p://self")
	other := pool("other", "c", "p://a", "p://b")
	elsewhere := machine("far", "c", "p://far")
	elsewhere.Namespace = "other-ns"
	for _, o := range []any{self, elsewhere} {
		if err := machines.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := pools.Add(other); err != nil {
		t.Fatal(err)
	}
	indexers := []cache.Indexer{machines, pools}
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{ids: []string{"p://self"}},
		{ids: []string{"p://new", ""}},
		{ids: []string{"p://far"}},
		{ids: []string{"p://b"}, want: `provider ID "p://b" is already held by TerraformMachinePool other in this namespace`},
		{ids: []string{"p://x", "p://x"}, want: `provider ID "p://x" is output twice`},
	} {
		err := HeldElsewhere(indexers, self, tc.ids)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("HeldElsewhere(%q) = %v, want %q", tc.ids, err, tc.want)
		}
	}
}

func TestHoldsInstances(t *testing.T) {
	tests := map[string]struct {
		obj  any
		want bool
	}{
		"a machine with an ID":   {&infrav1.TerraformMachine{Spec: infrav1.TerraformMachineSpec{ProviderID: "localcloud://i-1"}}, true},
		"a machine without":      {&infrav1.TerraformMachine{}, false},
		"a pool with IDs":        {&infrav1.TerraformMachinePool{Spec: infrav1.TerraformMachinePoolSpec{ProviderIDList: []string{"localcloud://i-1"}}}, true},
		"an empty pool":          {&infrav1.TerraformMachinePool{}, false},
		"a cluster holds no IDs": {&infrav1.TerraformCluster{}, false},
	}
	for name, tc := range tests {
		if got := HoldsInstances(tc.obj); got != tc.want {
			t.Errorf("%s: HoldsInstances = %v, want %v", name, got, tc.want)
		}
	}
}
