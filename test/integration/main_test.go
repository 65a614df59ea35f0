// Package integration tests CAPTF's API and the test framework against a
// real kube-apiserver, etcd and kube-controller-manager.
package integration

import (
	"testing"

	"github.com/captf/captf/test/framework"
)

// plane is shared by every test of the package: this machine has two cores.
var plane *framework.ControlPlane

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{}, &plane)
}
