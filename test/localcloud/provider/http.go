package provider

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// httpDataSource is localcloud_http: an HTTP request made while terraform
// plans, as hashicorp/http's data source makes one. The tests use it as
// what any module's code can do at plan time: send what it reads, with the
// credentials it finds, anywhere it can reach.
type httpDataSource struct{}

type httpModel struct {
	URL            types.String `tfsdk:"url"`
	Method         types.String `tfsdk:"method"`
	RequestHeaders types.Map    `tfsdk:"request_headers"`
	RequestBody    types.String `tfsdk:"request_body"`
	Insecure       types.Bool   `tfsdk:"insecure"`
	StatusCode     types.Int64  `tfsdk:"status_code"`
	ResponseBody   types.String `tfsdk:"response_body"`
}

func (d *httpDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_http"
}

func (d *httpDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An HTTP request made at plan time; a status other than 2xx is a result, not an error.",
		Attributes: map[string]schema.Attribute{
			"url":             schema.StringAttribute{Required: true},
			"method":          schema.StringAttribute{Optional: true, Description: "GET unless set."},
			"request_headers": schema.MapAttribute{Optional: true, ElementType: types.StringType},
			"request_body":    schema.StringAttribute{Optional: true},
			"insecure":        schema.BoolAttribute{Optional: true, Description: "Skip the server certificate's check."},
			"status_code":     schema.Int64Attribute{Computed: true},
			"response_body":   schema.StringAttribute{Computed: true},
		},
	}
}

func (d *httpDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m httpModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	method := m.Method.ValueString()
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if !m.RequestBody.IsNull() {
		body = strings.NewReader(m.RequestBody.ValueString())
	}
	hr, err := http.NewRequestWithContext(ctx, method, m.URL.ValueString(), body)
	if err != nil {
		resp.Diagnostics.AddError("localcloud_http: the request", err.Error())
		return
	}
	headers := map[string]string{}
	resp.Diagnostics.Append(m.RequestHeaders.ElementsAs(ctx, &headers, false)...)
	for k, v := range headers {
		hr.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: m.Insecure.ValueBool()}}} //nolint:gosec // the test's choice
	got, err := client.Do(hr)
	if err != nil {
		resp.Diagnostics.AddError("localcloud_http: "+method+" "+m.URL.ValueString(), err.Error())
		return
	}
	defer got.Body.Close()
	b, err := io.ReadAll(io.LimitReader(got.Body, 1<<20))
	if err != nil {
		resp.Diagnostics.AddError("localcloud_http: reading the answer", err.Error())
		return
	}
	m.StatusCode, m.ResponseBody = types.Int64Value(int64(got.StatusCode)), types.StringValue(string(b))
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
