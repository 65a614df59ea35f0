# A cluster's infrastructure on the local cloud (test/localcloud): a
# network, a load balancer for the API server and, optionally, instances
# beside it. Its provider is installed from a mirror, as a real cloud's is
# (docs/providers.md); ship the module with the .terraform.lock.hcl that
# hack/build-localcloud.sh writes (bin/localcloud.lock.hcl), and init checks
# the mirror's package against it.

terraform {
  required_providers {
    localcloud = {
      source  = "captf.io/captf/localcloud"
      version = "0.1.0"
    }
  }
}

variable "captf_cluster_name" {
  type = string
}

variable "endpoint" {
  type        = string
  description = "The local cloud's API."
}

variable "account" {
  type        = string
  description = "The cloud account: quotas and rate limits are per account."
}

variable "api_port" {
  type    = number
  default = 6443
}

variable "instances" {
  type        = number
  default     = 0
  description = "Instances beside the load balancer (bastions, say)."
}

variable "zones" {
  type    = list(string)
  default = ["zone-a", "zone-b"]
}

provider "localcloud" {
  endpoint = var.endpoint
  account  = var.account
}

resource "localcloud_network" "cluster" {
  name = var.captf_cluster_name
  cidr = "10.0.0.0/16"
}

resource "localcloud_load_balancer" "api" {
  name       = "${var.captf_cluster_name}-api"
  network_id = localcloud_network.cluster.id
  port       = var.api_port
}

resource "localcloud_instance" "extra" {
  count      = var.instances
  name       = "${var.captf_cluster_name}-${count.index}"
  network_id = localcloud_network.cluster.id
  zone       = var.zones[count.index % length(var.zones)]
}

output "control_plane_endpoint" {
  value = { host = localcloud_load_balancer.api.address, port = var.api_port }
}

output "failure_domains" {
  value = [for z in var.zones : { name = z, controlPlane = true }]
}

output "network_id" {
  value = localcloud_network.cluster.id
}

output "instances" {
  value = localcloud_instance.extra[*].provider_id
}
