# A "local cloud": each instance is a file in var.instance_dir, created and
# removed by local-exec provisioners on terraform_data. No provider download.

variable "captf_cluster_name" {
  type = string
}

variable "captf_name" {
  type = string
}

variable "instance_dir" {
  type        = string
  description = "Where instance files go."
}

variable "instances" {
  type    = number
  default = 1
}

variable "zones" {
  type    = list(string)
  default = ["zone-a", "zone-b"]
}

variable "api_port" {
  type    = number
  default = 6443
}

variable "sleep_seconds" {
  type        = number
  default     = 0
  description = "Makes each instance slow to create, for tests that interrupt an apply."
}

variable "state_padding_kib" {
  type        = number
  default     = 0
  description = "Random data kept in state, for tests of big states."
}

locals {
  paths    = [for i in range(var.instances) : "${var.instance_dir}/${var.captf_cluster_name}-${i}"]
  contents = [for i in range(var.instances) : "zone=${var.zones[i % length(var.zones)]}"]
  # Like a cloud API, the plan looks at the instances as they are: one that
  # is gone or changed out of band is replaced (drift). Each instance keeps
  # a hidden generation file so that the plan after a repair is clean.
  generation_files = [for p in local.paths : "${dirname(p)}/.${basename(p)}.generation"]
  generations      = [for f in local.generation_files : fileexists(f) ? tonumber(trimspace(file(f))) : 0]
  healthy          = [for i, p in local.paths : fileexists(p) ? trimspace(file(p)) == local.contents[i] : false]
}

# The generation files outlive a replaced instance (the plan's values must
# not change while it is applied); they go when the module is destroyed.
resource "terraform_data" "generations" {
  input = { dir = var.instance_dir, prefix = var.captf_cluster_name }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input.dir}'/.'${self.input.prefix}'-[0-9]*.generation"
  }
}

resource "terraform_data" "instance" {
  count      = var.instances
  depends_on = [terraform_data.generations]
  input = {
    path       = local.paths[count.index]
    generation = local.generation_files[count.index]
    zone       = var.zones[count.index % length(var.zones)]
  }
  triggers_replace = local.healthy[count.index] ? local.generations[count.index] : local.generations[count.index] + 1

  provisioner "local-exec" {
    command = "sleep ${var.sleep_seconds}; mkdir -p '${var.instance_dir}' && echo 'zone=${self.input.zone}' > '${self.input.path}' && echo '${self.triggers_replace}' > '${self.input.generation}'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input.path}'"
  }
}

resource "terraform_data" "padding" {
  count = var.state_padding_kib > 0 ? 1 : 0
  input = [for i in range(var.state_padding_kib) : sha512("${var.captf_name}-${i}")]
}

output "control_plane_endpoint" {
  value = {
    host = "${var.captf_cluster_name}.local.test"
    port = var.api_port
  }
}

output "failure_domains" {
  value = [for z in var.zones : { name = z, controlPlane = true, attributes = { region = "local" } }]
}

output "instances" {
  value = [for i in terraform_data.instance : i.input.path]
}

output "admin_password" {
  value     = "not-for-status"
  sensitive = true
}

# Read at every plan: it changes with no resource changing, which a refresh
# (refresh-only apply) records.
output "motd" {
  value = fileexists("${var.instance_dir}/.motd") ? trimspace(file("${var.instance_dir}/.motd")) : ""
}
