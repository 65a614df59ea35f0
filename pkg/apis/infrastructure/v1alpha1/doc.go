// Package v1alpha1 holds CAPTF's API: the Cluster API infrastructure kinds whose
// infrastructure is a Terraform module.
//
// +k8s:deepcopy-gen=package
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1
