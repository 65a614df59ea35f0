// Package manager is `captf manager`: flags, leader election, informers,
// controllers, probes and metrics.
package manager

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/controller/jobmetrics"
	"github.com/captf/captf/pkg/controller/terraformcluster"
	"github.com/captf/captf/pkg/controller/terraformmachine"
	"github.com/captf/captf/pkg/controller/terraformmachinepool"
	"github.com/captf/captf/pkg/controller/terraformmachinetemplate"
	"github.com/captf/captf/pkg/controller/terraformmodule"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"

	"github.com/captf/captf/pkg/intern"
	"github.com/captf/captf/pkg/logflags"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerapi"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/runnerpod"
	"github.com/captf/captf/pkg/version"
	"github.com/captf/captf/pkg/webhook"
)

// Options are the manager's flags.
type Options struct {
	Kubeconfig                 string
	Namespace                  string
	WatchFilter                string
	LeaderElect                bool
	LeaseDuration              time.Duration
	RenewDeadline              time.Duration
	RetryPeriod                time.Duration
	ClusterConcurrency         int
	MachineConcurrency         int
	MachinePoolConcurrency     int
	MachineTemplateConcurrency int
	SyncPeriod                 time.Duration
	DriftDefaultInterval       time.Duration
	StateBackups               int
	MaxConcurrentJobs          int
	MaxConcurrentJobsPerNS     int
	MaxStateBytes              int64
	RunnerImage                string
	ProviderMirrorImage        string
	WebhookPort                int
	RunnerAPIPort              int
	RunnerAPIURL               string
	RunnerPodSecurity          string
	AllowRunnerNodePlacement   bool
	WebhookCertDir             string
	WebhookCertName            string
	WebhookKeyName             string
	MetricsBindAddress         string
	MetricsSecure              bool
	MetricsCertDir             string
	MetricsCertName            string
	MetricsKeyName             string
	HealthProbeBindAddress     string
	QPS                        float64
	Burst                      int

	runnerPods runnerpod.Rules // from the two flags above
}

func (o *Options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
	fs.StringVar(&o.Namespace, "namespace", "", "watch only this namespace (default: all)")
	fs.StringVar(&o.WatchFilter, "watch-filter", "", "reconcile only the Terraform* and Cluster API objects labelled "+capi.WatchFilterLabel+"=<value>, as Cluster API's providers do (default: all)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "run controllers only while holding the leader Lease in $POD_NAMESPACE")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long non-leaders wait before taking over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between leader election attempts")
	fs.IntVar(&o.ClusterConcurrency, "terraformcluster-concurrency", 10, "TerraformClusters synced at once")
	fs.IntVar(&o.MachineConcurrency, "terraformmachine-concurrency", 10, "TerraformMachines synced at once")
	fs.IntVar(&o.MachinePoolConcurrency, "terraformmachinepool-concurrency", 10, "TerraformMachinePools synced at once")
	fs.IntVar(&o.MachineTemplateConcurrency, "terraformmachinetemplate-concurrency", 10, "TerraformMachineTemplates synced at once")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 10*time.Minute, "how often every object is synced even without a change")
	fs.DurationVar(&o.DriftDefaultInterval, "drift-default-interval", 30*time.Minute, "drift check interval of objects that set none")
	fs.IntVar(&o.StateBackups, "state-backups", 5, "state backups kept per object")
	fs.IntVar(&o.MaxConcurrentJobs, "max-concurrent-jobs", 0, "runner Jobs that run at once, in all (0: no cap); drift checks and refreshes yield to applies and destroys")
	fs.IntVar(&o.MaxConcurrentJobsPerNS, "max-concurrent-jobs-per-namespace", 0, "runner Jobs that run at once in one namespace (0: no cap)")
	fs.Int64Var(&o.MaxStateBytes, "max-state-bytes", run.DefaultMaxStateBytes, "largest state or backup CAPTF reads (uncompressed, and compressed); past it: a condition, never an out-of-memory kill")
	fs.StringVar(&o.RunnerImage, "runner-image", os.Getenv("CAPTF_MANAGER_IMAGE"), "image of runner Jobs (default: $CAPTF_MANAGER_IMAGE)")
	fs.StringVar(&o.ProviderMirrorImage, "provider-mirror-image", "", "image holding a provider mirror (terraform providers mirror) that runner pods mount read-only at "+run.ProviderMirrorDir+" and install providers from (an image volume: Kubernetes 1.36 or later)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port of the validating webhook server (0: no webhook server)")
	fs.IntVar(&o.RunnerAPIPort, "runner-api-port", 9445, "port of the runner API, where runner pods reach their state, lock and result (TLS, the webhook's certificate)")
	fs.StringVar(&o.RunnerAPIURL, "runner-api-url", "", "URL runner pods reach the runner API at (default: https://"+names.RunnerAPIService+".$POD_NAMESPACE.svc:<runner-api-port>)")
	fs.StringVar(&o.RunnerPodSecurity, "runner-pod-security", string(runnerpod.Restricted), "Pod Security level every runner pod meets, whatever its namespace's labels: restricted or baseline")
	fs.BoolVar(&o.AllowRunnerNodePlacement, "allow-runner-node-placement", false, "let objects choose their runner pods' nodes (spec.jobs.nodeSelector and tolerations)")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory of the webhook's certificate and key")
	fs.StringVar(&o.WebhookCertName, "webhook-cert-name", "tls.crt", "file name of the webhook certificate")
	fs.StringVar(&o.WebhookKeyName, "webhook-key-name", "tls.key", "file name of the webhook key")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", "address of the metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve metrics over HTTPS to callers the API server authenticates (TokenReview) and authorizes for get on /metrics (SubjectAccessReview); false: plain HTTP to anyone, for local use only")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory of the metrics endpoint's certificate and key (default: --webhook-cert-dir)")
	fs.StringVar(&o.MetricsCertName, "metrics-cert-name", "tls.crt", "file name of the metrics certificate")
	fs.StringVar(&o.MetricsKeyName, "metrics-key-name", "tls.key", "file name of the metrics key")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":9440", "address of /healthz and /readyz")
	fs.Float64Var(&o.QPS, "kube-api-qps", 200, "queries per second to the API server")
	fs.IntVar(&o.Burst, "kube-api-burst", 400, "burst of queries to the API server")
}

// Main is `captf manager`.
func Main(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	logger := klog.Background().WithName("manager")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.String())
	tuneGC(logger, os.Getenv, os.ReadFile)
	podNamespace, serviceAccount := os.Getenv("POD_NAMESPACE"), os.Getenv("SERVICE_ACCOUNT_NAME")
	if podNamespace == "" || serviceAccount == "" {
		logger.Info("Warning: POD_NAMESPACE or SERVICE_ACCOUNT_NAME is not set: the manager does not know its own username, and the webhook will refuse its providerID writes",
			"POD_NAMESPACE", podNamespace, "SERVICE_ACCOUNT_NAME", serviceAccount)
	}
	if err := o.complete(podNamespace); err != nil {
		return err
	}
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	v, _ := version.Get()
	cfg.UserAgent = "captf-manager/" + v
	m := &manager{options: o, clock: clock.RealClock{}, namespace: podNamespace}
	health := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	if err := m.serve(ctx, cfg, health, podNamespace, serviceAccount); err != nil {
		return err
	}
	if !o.LeaderElect {
		// The only manager leads: say so as an elected leader would
		// (CAPTFNoLeader reads leader_election_master_status).
		metrics.LeadingWithoutElection(names.LeaderLease(o.WatchFilter))
		return m.runControllers(ctx, cfg)
	}
	return m.lead(ctx, cfg, health, podNamespace)
}

// Flags are the manager's flags with their defaults, as -h lists them.
func Flags() *flag.FlagSet {
	fs, _, _ := newFlags()
	return fs
}

func newFlags() (*flag.FlagSet, *logflags.Flags, *Options) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	logs := logflags.Bind(fs)
	var o Options
	o.bind(fs)
	return fs, logs, &o
}

// parseOptions reads the manager's flags and applies its logging flags.
func parseOptions(args []string) (Options, error) {
	fs, logs, o := newFlags()
	if err := fs.Parse(args); err != nil {
		return *o, err
	}
	return *o, logs.Apply()
}

// complete checks the options and derives what they leave out: the runner
// pods' rules, and the runner API's URL from the manager's namespace.
func (o *Options) complete(podNamespace string) error {
	if o.RunnerImage == "" {
		return errors.New("--runner-image (or $CAPTF_MANAGER_IMAGE) is required: it is the image runner Jobs run")
	}
	level, err := runnerpod.ParseLevel(o.RunnerPodSecurity)
	if err != nil {
		return fmt.Errorf("--runner-pod-security: %w", err)
	}
	o.runnerPods = runnerpod.Rules{Level: level, AllowNodePlacement: o.AllowRunnerNodePlacement}
	if o.RunnerAPIURL == "" {
		if podNamespace == "" {
			return errors.New("--runner-api-url (or $POD_NAMESPACE, to derive it) is required: runner pods reach their state there")
		}
		o.RunnerAPIURL = fmt.Sprintf("https://%s.%s.svc:%d", names.RunnerAPIService, podNamespace, o.RunnerAPIPort)
	}
	return nil
}

// serve starts what every replica serves, leader or not: the runner API (a
// runner reaches whichever replica the Service picks), the webhook, the
// probes and the metrics.
func (m *manager) serve(ctx context.Context, cfg *rest.Config, health *leaderelection.HealthzAdaptor, podNamespace, serviceAccount string) error {
	o := m.options
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	captf, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	m.runnerAPI = webhook.NewServer(fmt.Sprintf(":%d", o.RunnerAPIPort), o.WebhookCertDir, o.WebhookCertName, o.WebhookKeyName, &runnerapi.Server{Kube: kube, Config: cfg, StateBackups: o.StateBackups, MaxStateBytes: o.MaxStateBytes, Clock: m.clock,
		CachedJob: m.cachedJob, ResultWritten: m.resultWritten, RunInputs: m.runInputs, CatalogNamespace: m.namespace, CatalogCredentials: catalogCredentials(kube, captf, m.namespace)})
	m.runnerAPI.Clock = m.clock
	m.runnerAPI.Name = "runner-api"
	metrics.WatchCertificate(m.runnerAPI.Name, m.runnerAPI.NotAfter)
	if err := m.runnerAPI.Start(ctx); err != nil {
		return err
	}
	if o.WebhookPort != 0 {
		if m.webhook, err = startWebhook(ctx, o, cfg, podNamespace, serviceAccount, m.clock); err != nil {
			return err
		}
	}
	if err := m.serveProbes(ctx, health); err != nil {
		return err
	}
	return m.serveMetrics(ctx, kube)
}

// lead runs the controllers while this replica holds the leader Lease, and
// exits when it loses it.
func (m *manager) lead(ctx context.Context, cfg *rest.Config, health *leaderelection.HealthzAdaptor, podNamespace string) error {
	o, logger := m.options, klog.FromContext(ctx)
	if podNamespace == "" {
		return errors.New("--leader-elect needs $POD_NAMESPACE: the leader Lease lives there")
	}
	m.synced.Store(true) // a standby has no controllers to wait for
	hostname, _ := os.Hostname()
	lease := names.LeaderLease(o.WatchFilter)
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, podNamespace, lease,
		resourcelock.ResourceLockConfig{Identity: hostname + "_" + string(uuid.NewUUID())}, cfg, o.RenewDeadline)
	if err != nil {
		return err
	}
	var runErr error
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, Name: lease, WatchDog: health,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		// The Lease is not released on stop: a successor waits it out, so
		// two leaders never overlap.
		ReleaseOnCancel: false,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading: starting controllers")
				m.synced.Store(false)
				runErr = m.runControllers(ctx, cfg)
				if runErr != nil {
					logger.Error(runErr, "Controllers stopped")
					klog.FlushAndExit(klog.ExitFlushTimeout, 1)
				}
			},
			OnStoppedLeading: func() {
				if ctx.Err() != nil {
					logger.Info("Stopped leading: shutting down")
					return
				}
				logger.Info("Lost the leader Lease: exiting")
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			},
		},
	})
	return runErr
}

type manager struct {
	options Options
	// namespace is the manager's own (POD_NAMESPACE): the catalog's
	// resolve Jobs and credentials are there.
	namespace string
	// synced: the leader's controllers have synced their informers (or
	// this replica is a standby). Readiness does not wait for it.
	synced  atomic.Bool
	webhook *webhook.Server // nil with --webhook-port=0
	// runnerAPI serves runner pods (package runnerapi).
	runnerAPI *webhook.Server
	// clock is the one clock of everything the manager runs.
	clock clock.WithTicker
	// jobs is the leader's synced Job cache, which the runner API reads;
	// nil on a standby.
	jobs atomic.Pointer[cache.Indexer]
	// results are the leader's readers' results, which the runner API
	// hands the results it forwards to; nil on a standby.
	results atomic.Pointer[runnerjob.Results]
	// inputs are the run inputs the leader's controllers created, which
	// the runner API serves once each; nil on a standby.
	inputs atomic.Pointer[workspace.RunInputs]
}

// runInputs is the run-inputs Secret namespace/name the leader's
// controllers just created, once; nil when it is not kept.
func (m *manager) runInputs(namespace, name string) *corev1.Secret {
	return m.inputs.Load().Take(namespace, name)
}

// resultWritten hands a result the runner API forwarded to the leader's
// readers.
func (m *manager) resultWritten(job types.UID, data map[string][]byte) {
	if results := m.results.Load(); results != nil {
		results.Wrote(job, data)
	}
}

// cachedJob is the runner API's look into the leader's Job cache: what it
// holds of the Job, as a Job. The cache holds only Jobs labelled CAPTF's.
func (m *manager) cachedJob(namespace, name string) *batchv1.Job {
	jobs := m.jobs.Load()
	if jobs == nil {
		return nil
	}
	obj, ok, _ := (*jobs).GetByKey(namespace + "/" + name)
	j, _ := obj.(*runnerjob.Cached)
	if !ok || j == nil {
		return nil
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, UID: j.UID,
		Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelObjectUID: string(j.ObjectUID),
			names.LabelOperation: string(j.Operation)}}}
	if j.Keyed {
		job.Spec.Template.Spec.Containers = []corev1.Container{{Env: []corev1.EnvVar{{Name: run.EnvWriteKey, Value: j.WriteKey}}}}
	}
	if ref, ok := j.ControllerRef(); ok {
		job.OwnerReferences = []metav1.OwnerReference{ref}
	}
	return job
}

// startWebhook serves the validating webhook; it runs on every replica.
func startWebhook(ctx context.Context, o Options, cfg *rest.Config, podNamespace, serviceAccount string, clk clock.PassiveClock) (*webhook.Server, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	captf, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := &webhook.Handler{
		RunnerPods: o.runnerPods,
		Authorize: webhook.SubjectAccessReviews(func(ctx context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
			return kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		}),
		ReadTemplate: func(ctx context.Context, namespace, resource, name string) ([]byte, error) {
			return captf.InfrastructureV1alpha1().RESTClient().Get().Namespace(namespace).Resource(resource).Name(name).DoRaw(ctx)
		},
		CatalogEntry: func(ctx context.Context, name string) (*infrav1.TerraformModule, error) {
			return captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, name, metav1.GetOptions{})
		},
		NamespaceLabels: func(ctx context.Context, namespace string) (map[string]string, error) {
			ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return ns.Labels, nil
		},
		Cluster: func(ctx context.Context, namespace, name string) (found, paused bool, err error) {
			cluster, err := dyn.Resource(capi.Cluster.Resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, false, nil
			}
			if err != nil {
				return false, false, err
			}
			paused, _, _ = unstructured.NestedBool(cluster.Object, "spec", "paused")
			return true, paused, nil
		},
	}
	if podNamespace != "" && serviceAccount != "" {
		h.ManagerUser = "system:serviceaccount:" + podNamespace + ":" + serviceAccount
	}
	srv := webhook.NewServer(fmt.Sprintf(":%d", o.WebhookPort), o.WebhookCertDir, o.WebhookCertName, o.WebhookKeyName, h.Mux())
	srv.Clock = clk
	metrics.WatchCertificate(srv.Name, srv.NotAfter)
	return srv, srv.Start(ctx)
}

// controllers are the controllers the manager runs, with their flags of
// concurrency: each asks the shared factories for the informers it reads,
// and the manager is ready when all of them have synced.
func (m *manager) controllers() []controllerDescriptor {
	o := &m.options
	ds := []controllerDescriptor{
		workspaceController(terraformcluster.Kind, o.ClusterConcurrency),
		workspaceController(terraformmachine.Kind, o.MachineConcurrency),
		workspaceController(terraformmachinepool.Kind, o.MachinePoolConcurrency),
		{terraformmachinetemplate.ControllerName, o.MachineTemplateConcurrency, func(ctx context.Context, cc controller.Context, _ workspace.Config) (controller.Interface, error) {
			return terraformmachinetemplate.NewController(ctx, cc)
		}},
		{jobmetrics.ControllerName, 2, func(ctx context.Context, cc controller.Context, config workspace.Config) (controller.Interface, error) {
			return jobmetrics.NewController(ctx, cc, config.Results)
		}},
	}
	// The catalog's resolve Jobs run in the manager's namespace, which a
	// manager of another namespace does not watch.
	if o.Namespace == "" || o.Namespace == m.namespace {
		ds = append(ds, controllerDescriptor{terraformmodule.ControllerName, 1, func(ctx context.Context, cc controller.Context, config workspace.Config) (controller.Interface, error) {
			return terraformmodule.NewController(ctx, cc, terraformmodule.Config{Namespace: m.namespace, RunnerImage: o.RunnerImage,
				ProviderMirrorImage: o.ProviderMirrorImage, RunnerAPI: config.RunnerAPI, RunnerPods: o.runnerPods, Results: config.Results,
				EnsureAccount: config.Access.Ensure, Jobs: &runnerjob.APIControl{Client: cc.Kube, FieldManager: terraformmodule.ControllerName},
				WatchFilter: o.WatchFilter})
		}})
	} else {
		klog.Background().Info("Warning: the module catalog is not served: --namespace is not the manager's own namespace, where its resolve Jobs run", "namespace", o.Namespace, "podNamespace", m.namespace)
	}
	return ds
}

// workspaceController describes the workspace controller of kind.
func workspaceController[T workspace.Object](kind workspace.Kind[T], workers int) controllerDescriptor {
	return controllerDescriptor{kind.Name(), workers, func(ctx context.Context, cc controller.Context, config workspace.Config) (controller.Interface, error) {
		return workspace.NewController(ctx, cc, config, kind)
	}}
}

type controllerDescriptor struct {
	name    string
	workers int
	new     func(context.Context, controller.Context, workspace.Config) (controller.Interface, error)
}

// runControllers builds the controllers and the informers they ask for, and
// runs them until ctx ends.
func (m *manager) runControllers(ctx context.Context, cfg *rest.Config) error {
	cc, config, start, err := m.informers(cfg)
	if err != nil {
		return err
	}
	type running struct {
		controllerDescriptor
		ctx context.Context
		controller.Interface
	}
	var controllers []running
	for _, d := range m.controllers() {
		cctx := klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), d.name))
		c, err := d.new(cctx, cc, config)
		if err != nil {
			return fmt.Errorf("%s controller: %w", d.name, err)
		}
		controllers = append(controllers, running{d, cctx, c})
	}
	metrics.SetObjectsCollector(config.Metrics)
	defer metrics.SetObjectsCollector(nil)
	jobs := cc.KubeInformers.Batch().V1().Jobs().Informer()
	stop := start(ctx)
	defer stop()
	defer m.jobs.Store(nil)
	m.results.Store(config.Results)
	defer m.results.Store(nil)
	m.inputs.Store(config.RunInputs)
	defer m.inputs.Store(nil)
	go func() {
		var synced []cache.InformerSynced
		for _, c := range controllers {
			synced = append(synced, c.HasSynced)
		}
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			indexer := jobs.GetIndexer()
			m.jobs.Store(&indexer)
			m.synced.Store(true)
		}
	}()
	var wg sync.WaitGroup
	for _, c := range controllers {
		wg.Go(func() { c.Run(c.ctx, c.workers) })
	}
	wg.Go(func() { config.Access.Run(ctx) })
	wg.Wait()
	return nil
}

// informers makes the clients and shared informer factories the
// controllers ask from; start starts whatever they asked for, and the stop
// it returns shuts them down.
func (m *manager) informers(cfg *rest.Config) (controller.Context, workspace.Config, func(context.Context) func(), error) {
	o := m.options
	cc := controller.Context{Clock: m.clock}
	dyn, meta, err := clients(cfg, &cc)
	if err != nil {
		return cc, workspace.Config{}, nil, err
	}
	shared := CacheFactories(&cc, dyn, o.Namespace, o.SyncPeriod, o.WatchFilter)
	// The metadata of state heads and durable inputs: what the checks
	// before every Job read, without their data.
	var own informerSet
	stateSecrets := metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("secrets"), namespaceOrAll(o.Namespace),
		o.SyncPeriod, noIndexes(), func(lo *metav1.ListOptions) { lo.LabelSelector = workspace.StateSecretsSelector })
	if err := stateSecrets.Informer().SetTransform(cacheTransform(shared, workspace.CacheStateSecret)); err != nil {
		return cc, workspace.Config{}, nil, err
	}
	own.add(stateSecrets.Informer())
	access := &workspace.RunnerAccess{Client: cc.Kube}
	if err := access.Watch(cc.KubeInformers.Core().V1().ServiceAccounts().Informer()); err != nil {
		return cc, workspace.Config{}, nil, err
	}
	api := workspace.RunnerAPI{URL: o.RunnerAPIURL, CAFile: filepath.Join(o.WebhookCertDir, "ca.crt")}
	slots := runnerjob.NewSlots(o.MaxConcurrentJobs, o.MaxConcurrentJobsPerNS, m.clock)
	if slots != nil {
		if err := slots.Watch(cc.KubeInformers.Batch().V1().Jobs().Informer()); err != nil {
			return cc, workspace.Config{}, nil, err
		}
	}
	config := workspace.Config{Access: access, RunnerAPI: api, Slots: slots, RunnerPods: o.runnerPods, RunnerImage: o.RunnerImage, ProviderMirrorImage: o.ProviderMirrorImage, StateBackups: o.StateBackups, DriftDefaultInterval: o.DriftDefaultInterval,
		MaxStateBytes: o.MaxStateBytes, StateSecrets: stateSecrets, Metrics: &workspace.Collector{MaxStateBytes: o.MaxStateBytes},
		BootstrapConfigs: bootstrapConfigs(cc.Kube, meta, m.clock), Results: &runnerjob.Results{Kube: cc.Kube}, RunInputs: &workspace.RunInputs{}, Records: &workspace.APIRunRecords{Meta: meta},
		Catalog: &workspace.Catalog{Modules: cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformModules().Lister(), Namespace: m.namespace}}
	start := func(ctx context.Context) func() {
		cc.CAPTFInformers.Start(ctx.Done())
		cc.KubeInformers.Start(ctx.Done())
		cc.CAPIInformers.Start(ctx.Done())
		own.Start(ctx.Done())
		return func() {
			cc.CAPTFInformers.Shutdown()
			cc.KubeInformers.Shutdown()
			cc.CAPIInformers.Shutdown()
			own.Shutdown()
		}
	}
	return cc, config, start, nil
}

// clients makes the controllers' clients: cc's typed ones, and the dynamic
// (Cluster API's objects) and metadata-only (state Secrets) ones.
func clients(cfg *rest.Config, cc *controller.Context) (dynamic.Interface, metadata.Interface, error) {
	var err error
	if cc.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, err
	}
	if cc.CAPTF, err = versioned.NewForConfig(cfg); err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	return dyn, meta, err
}

func (m *manager) serveProbes(ctx context.Context, health *leaderelection.HealthzAdaptor) error {
	if m.options.HealthProbeBindAddress == "0" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := health.Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// Ready means serving: the webhook and the runner API answer with a
	// certificate. It never waits for the controllers: while the leader's
	// informers sync (or cannot, when an API they read is not served) the
	// Service must still reach the webhook, or every write to a Terraform*
	// object fails.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if m.webhook != nil {
			if err := m.webhook.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		if err := m.runnerAPI.Ready(); err != nil {
			http.Error(w, "runner API: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// The controllers' own signal, for people and tests, not for a probe.
	mux.HandleFunc("/readyz/controllers", func(w http.ResponseWriter, _ *http.Request) {
		if !m.synced.Load() {
			http.Error(w, "the controllers' informers have not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return serve(ctx, "probes", m.options.HealthProbeBindAddress, mux)
}

// serveMetrics serves /metrics on every replica: over TLS to callers the
// API server lets get it, unless --metrics-secure=false. The secure server
// also serves /debug/pprof/ the same way.
func (m *manager) serveMetrics(ctx context.Context, kube kubernetes.Interface) error {
	o := m.options
	if o.MetricsBindAddress == "0" {
		return nil
	}
	mux := http.NewServeMux()
	h := promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{})
	if !o.MetricsSecure {
		klog.FromContext(ctx).Info("Warning: metrics are served over plain HTTP to anyone who can connect (--metrics-secure=false)")
		mux.Handle("/metrics", h)
		return serve(ctx, "metrics", o.MetricsBindAddress, mux)
	}
	authz := &metrics.Authorizer{Kube: kube, Clock: m.clock}
	mux.Handle("/metrics", authz.Wrap(h))
	// Go's profiles, for callers the API server lets get /debug/pprof/...
	// (not captf-metrics-reader): where the manager's memory and CPU go.
	mux.Handle("/debug/pprof/", authz.Wrap(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", authz.Wrap(http.HandlerFunc(pprof.Profile)))
	srv := webhook.NewServer(o.MetricsBindAddress, cmp.Or(o.MetricsCertDir, o.WebhookCertDir), o.MetricsCertName, o.MetricsKeyName, mux)
	srv.Clock = m.clock
	srv.Name = "metrics"
	metrics.WatchCertificate(srv.Name, srv.NotAfter)
	return srv.Start(ctx)
}

func serve(ctx context.Context, name, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 32 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ListenAndServe() }()
	select {
	case err := <-errCh:
		return fmt.Errorf("%s server on %s: %w", name, addr, err)
	case <-time.After(100 * time.Millisecond): // a listen error comes at once, if at all
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	}
	return cfg, err
}

func namespaceOrAll(ns string) string {
	if ns == "" {
		return metav1.NamespaceAll
	}
	return ns
}

// newSharedStrings is the pool of the strings the informers' objects
// share: label keys, and the values of the labels that repeat.
func newSharedStrings() *intern.Pool {
	return &intern.Pool{LabelValues: map[string]bool{names.LabelManagedBy: true, names.LabelKind: true,
		names.LabelOperation: true, names.LabelAttempt: true, names.LabelSecretType: true}}
}

// cacheTransform is the informers' transform: it applies trim, drops
// managedFields (CAPTF never reads them and they are often the biggest
// part of an object) and shares the strings that repeat across objects.
func cacheTransform(shared *intern.Pool, trim func(any) any) cache.TransformFunc {
	return func(obj any) (any, error) {
		if trim != nil {
			obj = trim(obj)
		}
		// These two keep their metadata in fields of their own, not an
		// ObjectMeta: GetObjectMeta makes a copy.
		switch o := obj.(type) {
		case *workspace.StateSecretMeta:
			o.Namespace, o.Kind = shared.String(o.Namespace), shared.String(o.Kind)
			return o, nil
		case *runnerjob.Cached:
			o.Namespace, o.Operation = shared.String(o.Namespace), infrav1.Operation(shared.String(string(o.Operation)))
			o.Controller.APIVersion, o.Controller.Kind = shared.String(o.Controller.APIVersion), shared.String(o.Controller.Kind)
			o.Status.EndReason = shared.String(o.Status.EndReason)
			return o, nil
		}
		accessor, ok := obj.(metav1.ObjectMetaAccessor)
		if !ok {
			return obj, nil
		}
		meta := accessor.GetObjectMeta()
		meta.SetManagedFields(nil)
		if _, ok := obj.(workspace.Object); ok {
			meta.SetAnnotations(workspace.CachedAnnotations(meta.GetAnnotations()))
		}
		shared.Meta(meta)
		switch o := obj.(type) {
		case workspace.Object: // a Terraform* object that is not a template
			st := o.WorkspaceStatus()
			// Decoding grew these by doubling: five conditions took the
			// room of eight, 288 bytes an object.
			st.Conditions, st.LastJobs = exactly(st.Conditions), exactly(st.LastJobs)
			shared.Conditions(st.Conditions)
		case *capi.Object:
			o.APIVersion, o.Kind = shared.String(o.APIVersion), shared.String(o.Kind)
			for _, ref := range []*capi.Ref{o.Spec.InfrastructureRef, o.Spec.BootstrapConfigRef} {
				if ref != nil {
					ref.APIGroup, ref.Kind = shared.String(ref.APIGroup), shared.String(ref.Kind)
				}
			}
			o.Spec.Version = shared.String(o.Spec.Version)
		}
		return obj, nil
	}
}

// exactly is s in a slice of its length: the room JSON decoding left
// beyond it is given back.
func exactly[S ~[]E, E any](s S) S {
	if cap(s) == len(s) {
		return s
	}
	return append(S(nil), s...)
}

// bootstrapConfigs reads the metadata of bootstrap configs (kinds of
// Cluster API's bootstrap group, whichever provider serves them), their
// resources found through discovery.
//
// Discovery is cached; a kind it does not know (a bootstrap provider
// installed since) or a resource gone (a version no longer served) reads
// it again, at most once a minute: a tenant's Machine naming kinds that do
// not exist must not cost the API server a discovery each sync.
func bootstrapConfigs(kube kubernetes.Interface, meta metadata.Interface, clk clock.PassiveClock) workspace.BootstrapConfigReader {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	var mu sync.Mutex
	var lastReset time.Time
	stale := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if clk.Since(lastReset) < time.Minute {
			return false
		}
		lastReset = clk.Now()
		mapper.Reset()
		return true
	}
	get := func(ctx context.Context, namespace, group, kind, name string) (metav1.Object, error) {
		mapping, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
		if err != nil {
			return nil, fmt.Errorf("finding the resource of %s.%s: %w", kind, group, err)
		}
		obj, err := meta.Resource(mapping.Resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && !servesObjects(err, mapping.Resource.Resource) {
			return nil, &apimeta.NoResourceMatchError{PartialResource: mapping.Resource}
		}
		return obj, err
	}
	return func(ctx context.Context, namespace, group, kind, name string) (metav1.Object, error) {
		if group != capi.BootstrapGroup {
			return nil, apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: kind}, name)
		}
		obj, err := get(ctx, namespace, group, kind, name)
		if apimeta.IsNoMatchError(err) && stale() {
			obj, err = get(ctx, namespace, group, kind, name)
		}
		return obj, err
	}
}

// servesObjects tells a 404 for a missing object (its details name the
// resource) from one for a resource the server no longer serves.
func servesObjects(err error, resource string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	return status.Status().Details.Kind == resource || strings.HasPrefix(status.Status().Details.Kind, resource)
}
