//go:build tools

// Package tools pins Prometheus and promtool, which the tests build (with
// -tags remove_all_sd: static scrape targets only) to check the shipped
// alerts. A module of their own: their dependencies must not move the
// control plane's.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
