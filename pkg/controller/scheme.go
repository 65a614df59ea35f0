package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Scheme knows the core types and CAPTF's, for events about our objects.
var Scheme = runtime.NewScheme()

func init() {
	if err := clientgoscheme.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	if err := infrav1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
}
