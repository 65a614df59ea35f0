package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
)

// TestManagerInformers: every cache the manager's controllers read lists
// and watches with its selector (--watch-filter for CAPTF's and Cluster
// API's objects, CAPTF's label for Jobs and ServiceAccounts, the state
// Secrets' for their metadata), and keeps no namespace index.
func TestManagerInformers(t *testing.T) {
	var mu sync.Mutex
	selectors := map[string]string{} // path → labelSelector of its last request
	// An API server with nothing to list: it refuses a streamed list (the
	// informer then lists) and holds a watch open.
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		selectors[r.URL.Path] = r.URL.Query().Get("labelSelector")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`)
		case r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			<-r.Context().Done()
		case strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList"):
			fmt.Fprint(w, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		case strings.HasPrefix(r.URL.Path, "/apis/cluster.x-k8s.io/"): // the dynamic client's list needs a kind
			fmt.Fprint(w, `{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"1"},"items":[]}`)
		}
	}))
	defer server.Close()

	m := &manager{options: Options{WatchFilter: "canary", SyncPeriod: time.Hour}, clock: clocktesting.NewFakeClock(time.Now())}
	cc, config, start, err := m.informers(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	v1 := cc.CAPTFInformers.Infrastructure().V1alpha1()
	filtered := capi.WatchFilterLabel + "=canary"
	managed := names.LabelManagedBy + "=" + names.ManagedByValue
	informers := map[string]struct {
		informer cache.SharedIndexInformer
		selector string
	}{
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformclusters":         {v1.TerraformClusters().Informer(), filtered},
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachines":         {v1.TerraformMachines().Informer(), filtered},
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachinepools":     {v1.TerraformMachinePools().Informer(), filtered},
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachinetemplates": {v1.TerraformMachineTemplates().Informer(), filtered},
		// The catalog is every shard's.
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmodules":      {v1.TerraformModules().Informer(), ""},
		"/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformplanpolicies": {v1.TerraformPlanPolicies().Informer(), ""},
		"/apis/cluster.x-k8s.io/v1beta2/clusters":                              {cc.CAPIInformers.ForResource(capi.Cluster.Resource).Informer(), filtered},
		"/apis/cluster.x-k8s.io/v1beta2/machines":                              {cc.CAPIInformers.ForResource(capi.Machine.Resource).Informer(), filtered},
		"/apis/batch/v1/jobs":     {cc.KubeInformers.Batch().V1().Jobs().Informer(), managed},
		"/api/v1/serviceaccounts": {cc.KubeInformers.Core().V1().ServiceAccounts().Informer(), managed},
		"/api/v1/secrets":         {config.StateSecrets.Informer(), workspace.StateSecretsSelector},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	stop := start(ctx)
	defer func() { cancel(); stop() }()
	for path, tc := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), tc.informer.HasSynced) {
			t.Fatalf("%s: never synced", path)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for path, tc := range informers {
		if _, ok := tc.informer.GetIndexer().GetIndexers()[cache.NamespaceIndex]; ok {
			t.Errorf("%s: its cache has a namespace index: nothing reads it", path)
		}
		if got, ok := selectors[path]; !ok || got != tc.selector {
			t.Errorf("%s: listed with labelSelector %q (listed: %v), want %q", path, got, ok, tc.selector)
		}
	}
}
