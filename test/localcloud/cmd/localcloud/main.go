// Command localcloud serves the local cloud's API (package server).
//
//	localcloud -listen 127.0.0.1:8787 -state /tmp/cloud.json -instances 20 -rate 50
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/captf/captf/test/localcloud/server"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8787", "address to serve on (port 0: any; the address is printed)")
	state := flag.String("state", "", "file that keeps the resources across restarts")
	instances := flag.Int("instances", -1, "instance quota of every account not set otherwise (-1: none)")
	rate := flag.Float64("rate", 0, "requests a second each account may make (0: no limit)")
	burst := flag.Int("burst", 20, "requests an account may make at once")
	latency := flag.Duration("create-latency", 0, "how long an instance or load balancer is pending")
	flag.Parse()
	s := &server.Server{StateFile: *state, Defaults: server.Limits{Rate: *rate, Burst: *burst, CreateLatency: server.Duration(*latency)}}
	if *instances >= 0 {
		s.Defaults.Quotas = map[string]int{"instances": *instances}
	}
	if err := s.Load(); err != nil {
		fmt.Fprintln(os.Stderr, "localcloud:", err)
		os.Exit(1)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcloud:", err)
		os.Exit(1)
	}
	fmt.Printf("localcloud serving on http://%s\n", l.Addr())
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "localcloud:", err)
		os.Exit(1)
	}
}
