package v1alpha1

// The kinds that run Terraform share their module, policies and status
// through these accessors, so one engine serves them all.

// Workspace returns the object's module, variables and policies.
func (c *TerraformCluster) Workspace() *WorkspaceSpec { return &c.Spec.WorkspaceSpec }

// WorkspaceStatus returns the status CAPTF keeps for its own work.
func (c *TerraformCluster) WorkspaceStatus() *WorkspaceStatus { return &c.Status.WorkspaceStatus }

// Workspace returns the object's module, variables and policies.
func (m *TerraformMachine) Workspace() *WorkspaceSpec { return &m.Spec.WorkspaceSpec }

// WorkspaceStatus returns the status CAPTF keeps for its own work.
func (m *TerraformMachine) WorkspaceStatus() *WorkspaceStatus { return &m.Status.WorkspaceStatus }

// Workspace returns the object's module, variables and policies.
func (p *TerraformMachinePool) Workspace() *WorkspaceSpec { return &p.Spec.WorkspaceSpec }

// WorkspaceStatus returns the status CAPTF keeps for its own work.
func (p *TerraformMachinePool) WorkspaceStatus() *WorkspaceStatus { return &p.Status.WorkspaceStatus }
