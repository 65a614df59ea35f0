# A machine of the "local cloud": a file holding its bootstrap data, created
# and removed by local-exec provisioners on terraform_data.

variable "captf_name" {
  type = string
}

variable "captf_bootstrap_data" {
  type      = string
  sensitive = true
}

variable "captf_failure_domain" {
  type    = string
  default = ""
}

variable "instance_dir" {
  type = string
}

locals {
  path = "${var.instance_dir}/${var.captf_name}"
  # The plan looks at the machine as it is: one removed out of band is
  # replaced (drift). The hidden generation file keeps the plan after a
  # repair clean.
  generation_file = "${var.instance_dir}/.${var.captf_name}.generation"
  generation      = fileexists(local.generation_file) ? tonumber(trimspace(file(local.generation_file))) : 0
}

# The generation file outlives a replaced instance (the plan's values must
# not change while it is applied); it goes when the machine is destroyed.
resource "terraform_data" "generation" {
  input = local.generation_file

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input}'"
  }
}

resource "terraform_data" "instance" {
  depends_on = [terraform_data.generation]
  input = {
    path       = local.path
    generation = local.generation_file
    bootstrap  = var.captf_bootstrap_data
  }
  triggers_replace = fileexists(local.path) ? local.generation : local.generation + 1

  provisioner "local-exec" {
    command = "mkdir -p '${var.instance_dir}' && printf '%s' \"$BOOTSTRAP\" > '${self.input.path}' && echo '${self.triggers_replace}' > '${self.input.generation}'"
    environment = {
      BOOTSTRAP = self.input.bootstrap
    }
  }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input.path}'"
  }
}

output "provider_id" {
  value = "local:///${var.captf_name}"
}

output "addresses" {
  value = [
    { type = "Hostname", address = var.captf_name },
    { type = "InternalIP", address = "10.0.0.10" },
  ]
}

output "failure_domain" {
  value = var.captf_failure_domain != "" ? var.captf_failure_domain : "zone-a"
}
