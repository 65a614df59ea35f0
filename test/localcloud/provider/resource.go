package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// kind describes one resource type: its API kind and its attributes beyond
// id, name and tags (which every kind has).
type kind struct {
	typeName, api, description string
	// strings and ints are set by the user and force a new resource;
	// required ones must be set.
	strings, ints []string
	required      []string
	sensitive     []string
	// computed are read from the API.
	computed []string
}

var (
	networkKind = kind{typeName: "network", api: "networks", description: "A network.",
		strings: []string{"cidr"}}
	loadBalancerKind = kind{typeName: "load_balancer", api: "load_balancers", description: "A load balancer in a network.",
		strings: []string{"network_id"}, ints: []string{"port"}, required: []string{"network_id", "port"}, computed: []string{"address"}}
	instanceKind = kind{typeName: "instance", api: "instances", description: "An instance in a network; provider_id is localcloud:///ZONE/ID.",
		strings: []string{"network_id", "zone", "size", "user_data"}, required: []string{"network_id"}, sensitive: []string{"user_data"},
		computed: []string{"address", "provider_id"}}
)

// cloudResource is a resource of one kind, read and written attribute by
// attribute: the three kinds share it.
type cloudResource struct {
	kind   kind
	client *client
}

func (r *cloudResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_" + r.kind.typeName
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (r *cloudResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	attrs := map[string]schema.Attribute{
		"id":   schema.StringAttribute{Computed: true, PlanModifiers: keep, Description: "The ID the cloud assigned."},
		"name": schema.StringAttribute{Required: true},
		"tags": schema.MapAttribute{ElementType: types.StringType, Optional: true},
	}
	for _, a := range r.kind.strings {
		attrs[a] = schema.StringAttribute{Required: contains(r.kind.required, a), Optional: !contains(r.kind.required, a),
			Sensitive: contains(r.kind.sensitive, a), PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
	}
	for _, a := range r.kind.ints {
		attrs[a] = schema.Int64Attribute{Required: contains(r.kind.required, a), Optional: !contains(r.kind.required, a),
			PlanModifiers: []planmodifier.Int64{int64RequiresReplace{}}}
	}
	for _, a := range r.kind.computed {
		attrs[a] = schema.StringAttribute{Computed: true, PlanModifiers: keep}
	}
	resp.Schema = schema.Schema{Description: r.kind.description, Attributes: attrs}
}

func (r *cloudResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if c, ok := req.ProviderData.(*client); ok {
		r.client = c
	}
}

// fromPlan reads the user's attributes.
func (r *cloudResource) fromPlan(ctx context.Context, plan tfsdk.Plan) (*apiResource, error) {
	var res apiResource
	var name types.String
	var tags map[string]string
	if d := plan.GetAttribute(ctx, path.Root("name"), &name); d.HasError() {
		return nil, fmt.Errorf("name: %v", d)
	}
	if d := plan.GetAttribute(ctx, path.Root("tags"), &tags); d.HasError() {
		return nil, fmt.Errorf("tags: %v", d)
	}
	res.Name, res.Tags = name.ValueString(), tags
	fields := map[string]*string{"cidr": &res.CIDR, "network_id": &res.NetworkID, "zone": &res.Zone, "size": &res.Size, "user_data": &res.UserData}
	for _, a := range r.kind.strings {
		var v types.String
		if d := plan.GetAttribute(ctx, path.Root(a), &v); d.HasError() {
			return nil, fmt.Errorf("%s: %v", a, d)
		}
		*fields[a] = v.ValueString()
	}
	for _, a := range r.kind.ints {
		var v types.Int64
		if d := plan.GetAttribute(ctx, path.Root(a), &v); d.HasError() {
			return nil, fmt.Errorf("%s: %v", a, d)
		}
		res.Port = int(v.ValueInt64())
	}
	return &res, nil
}

// setComputed writes what the API assigned.
func (r *cloudResource) setComputed(ctx context.Context, state *tfsdk.State, res *apiResource) error {
	values := map[string]string{"id": res.ID, "address": res.Address, "provider_id": fmt.Sprintf("localcloud:///%s/%s", res.Zone, res.ID)}
	for _, a := range append([]string{"id"}, r.kind.computed...) {
		if d := state.SetAttribute(ctx, path.Root(a), types.StringValue(values[a])); d.HasError() {
			return fmt.Errorf("%s: %v", a, d)
		}
	}
	return nil
}

func (r *cloudResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	in, err := r.fromPlan(ctx, req.Plan)
	if err != nil {
		resp.Diagnostics.AddError("localcloud: reading the plan", err.Error())
		return
	}
	out, err := r.client.create(ctx, r.kind.api, in)
	if err != nil {
		resp.Diagnostics.AddError(fmt.Sprintf("creating %s %q", r.kind.typeName, in.Name), err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, req.Plan.Raw)...)
	if err := r.setComputed(ctx, &resp.State, out); err != nil {
		resp.Diagnostics.AddError("localcloud: writing the state", err.Error())
	}
}

func (r *cloudResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.read(ctx, r.kind.api, id.ValueString())
	if isNotFound(err) {
		resp.State.RemoveResource(ctx) // gone out of band: planned anew
		return
	}
	if err != nil {
		resp.Diagnostics.AddError(fmt.Sprintf("reading %s %s", r.kind.typeName, id.ValueString()), err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), out.Name)...)
	if len(out.Tags) > 0 {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tags"), out.Tags)...)
	}
}

func (r *cloudResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	in, err := r.fromPlan(ctx, req.Plan)
	if err != nil {
		resp.Diagnostics.AddError("localcloud: reading the plan", err.Error())
		return
	}
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.update(ctx, r.kind.api, id.ValueString(), in.Name, in.Tags); err != nil {
		resp.Diagnostics.AddError(fmt.Sprintf("updating %s %s", r.kind.typeName, id.ValueString()), err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, req.Plan.Raw)...)
}

func (r *cloudResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.delete(ctx, r.kind.api, id.ValueString()); err != nil {
		resp.Diagnostics.AddError(fmt.Sprintf("deleting %s %s", r.kind.typeName, id.ValueString()), err.Error())
	}
}

// int64RequiresReplace forces a new resource when an int changes.
type int64RequiresReplace struct{}

func (int64RequiresReplace) Description(context.Context) string {
	return "changing it makes a new resource"
}
func (int64RequiresReplace) MarkdownDescription(ctx context.Context) string {
	return int64RequiresReplace{}.Description(ctx)
}

func (int64RequiresReplace) PlanModifyInt64(_ context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.State.Raw.IsNull() && !req.PlanValue.Equal(req.StateValue) {
		resp.RequiresReplace = true
	}
}
