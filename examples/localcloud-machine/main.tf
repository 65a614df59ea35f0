# A machine on the local cloud (test/localcloud): an instance in its
# cluster's network (the localcloud-cluster module's network_id export),
# booted with the Machine's bootstrap data. Its provider comes from a mirror
# (docs/providers.md); ship the lock file hack/build-localcloud.sh writes.

terraform {
  required_providers {
    localcloud = {
      source  = "captf.io/captf/localcloud"
      version = "0.1.0"
    }
  }
}

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

variable "captf_cluster_exports" {
  type = object({ network_id = string })
}

variable "endpoint" {
  type        = string
  description = "The local cloud's API."
}

variable "account" {
  type        = string
  description = "The cloud account: its instance quota bounds the machines."
}

variable "size" {
  type    = string
  default = "small"
}

provider "localcloud" {
  endpoint = var.endpoint
  account  = var.account
}

resource "localcloud_instance" "machine" {
  name       = var.captf_name
  network_id = var.captf_cluster_exports.network_id
  zone       = var.captf_failure_domain != "" ? var.captf_failure_domain : "zone-a"
  size       = var.size
  user_data  = var.captf_bootstrap_data
}

output "provider_id" {
  value = localcloud_instance.machine.provider_id
}

output "addresses" {
  value = [{ type = "InternalIP", address = localcloud_instance.machine.address }]
}
