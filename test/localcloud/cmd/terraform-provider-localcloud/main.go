// Command terraform-provider-localcloud is the local cloud's provider
// plugin, which terraform and tofu start.
package main

import (
	"context"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/captf/captf/test/localcloud/provider"
)

// version is set by hack/build-localcloud.sh.
var version = "0.1.0"

func main() {
	if err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{Address: provider.Address}); err != nil {
		log.Fatal(err)
	}
}
