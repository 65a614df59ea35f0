package controller

import (
	"context"

	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
)

// Context is what the manager gives every controller it starts: clients,
// and the shared informer factories a controller asks for what it reads.
// The manager then starts what was asked for, and is ready when every
// controller has synced.
type Context struct {
	Kube  kubernetes.Interface
	CAPTF versioned.Interface
	// KubeInformers hold only what CAPTF made (names.LabelManagedBy).
	KubeInformers  informers.SharedInformerFactory
	CAPTFInformers externalversions.SharedInformerFactory
	// CAPIInformers hold Cluster API's objects: the manager's as
	// capi.Objects (capi.Trim), others' unstructured; read them with
	// capi.ObjectOf.
	CAPIInformers dynamicinformer.DynamicSharedInformerFactory
	// Clock is the controllers' one clock; nil is the real one.
	Clock clock.WithTicker
}

// ClockOrReal is cc's clock, the real one when none was given.
func (cc Context) ClockOrReal() clock.WithTicker {
	if cc.Clock == nil {
		return clock.RealClock{}
	}
	return cc.Clock
}

// Interface is a controller the manager runs.
type Interface interface {
	// Run runs workers until ctx ends.
	Run(ctx context.Context, workers int)
	// HasSynced tells whether every informer the controller reads has.
	HasSynced() bool
}
