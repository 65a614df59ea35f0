# A machine pool of the "local cloud": one file per replica.

variable "captf_name" {
  type = string
}

variable "captf_replicas" {
  type = number
}

variable "captf_cluster_exports" {
  type    = any
  default = {}
}

variable "instance_dir" {
  type = string
}

resource "terraform_data" "instance" {
  count = var.captf_replicas
  input = {
    path = "${var.instance_dir}/${var.captf_name}-${count.index}"
    # The cluster's exports are part of each instance: a change of them
    # updates the pool.
    api_port = try(var.captf_cluster_exports.control_plane_endpoint.port, 0)
  }

  provisioner "local-exec" {
    command = "mkdir -p '${var.instance_dir}' && echo 'api_port=${self.input.api_port}' > '${self.input.path}'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input.path}'"
  }
}

output "provider_ids" {
  value = [for i in range(var.captf_replicas) : "local:///${var.captf_name}-${i}"]
}

output "api_port" {
  value = try(var.captf_cluster_exports.control_plane_endpoint.port, 0)
}
