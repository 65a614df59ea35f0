// Package provider is the local cloud's Terraform provider
// (terraform-plugin-framework): localcloud_network,
// localcloud_load_balancer and localcloud_instance, with IDs the cloud
// assigns, and the data source localcloud_http (a request at plan time, as
// module code makes them). It is installed the way users install any provider: from a
// mirror (hack/build-localcloud.sh makes one).
package provider

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the provider's source address: modules write
// source = "captf.io/captf/localcloud" in required_providers.
const Address = "captf.io/captf/localcloud"

// New returns the provider.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &cloudProvider{version: version} }
}

type cloudProvider struct{ version string }

type providerModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	Account  types.String `tfsdk:"account"`
}

func (p *cloudProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName, resp.Version = "localcloud", p.version
}

func (p *cloudProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The local cloud CAPTF's tests and quickstart run.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{Optional: true, Description: "The API's URL (else LOCALCLOUD_ENDPOINT)."},
			"account":  schema.StringAttribute{Optional: true, Description: "The account (else LOCALCLOUD_ACCOUNT)."},
		},
	}
}

func (p *cloudProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := &client{endpoint: m.Endpoint.ValueString(), account: m.Account.ValueString(), http: &http.Client{Timeout: 30 * time.Second}}
	if c.endpoint == "" {
		c.endpoint = os.Getenv("LOCALCLOUD_ENDPOINT")
	}
	if c.account == "" {
		c.account = os.Getenv("LOCALCLOUD_ACCOUNT")
	}
	if c.endpoint == "" || c.account == "" {
		resp.Diagnostics.AddError("localcloud: no endpoint or account", "Set the provider's endpoint and account, or LOCALCLOUD_ENDPOINT and LOCALCLOUD_ACCOUNT.")
		return
	}
	resp.ResourceData = c
}

func (p *cloudProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &cloudResource{kind: networkKind} },
		func() resource.Resource { return &cloudResource{kind: loadBalancerKind} },
		func() resource.Resource { return &cloudResource{kind: instanceKind} },
	}
}

func (p *cloudProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{func() datasource.DataSource { return &httpDataSource{} }}
}
