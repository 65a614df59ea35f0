//go:build tools

// Package tools pins Velero, its AWS object-store plugin and the S3
// stand-in the disaster-recovery test runs (TestVeleroOrderRestoresClonedMachines, test/capi). A module of its
// own: Velero's dependencies must not move the control plane's.
package tools

import (
	_ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
	_ "github.com/vmware-tanzu/velero/cmd/velero"
)
