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

resource "terraform_data" "instance" {
  input = {
    path      = "${var.instance_dir}/${var.captf_name}"
    bootstrap = var.captf_bootstrap_data
  }

  provisioner "local-exec" {
    command = "mkdir -p '${var.instance_dir}' && printf '%s' \"$BOOTSTRAP\" > '${self.input.path}'"
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
