package framework

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// signalPod sends sig to every process of the pod whose main process is
// pid: its session, which the executor starts it in, holds every process
// it made, whatever group a process made for itself (the runner gives
// terraform one of its own) and whoever adopted it after its parent died.
// What a kubelet stopping a container, or a node freezing, does to all of
// a pod's processes.
func signalPod(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
	// Twice: a process forked while the first walk ran is in the second.
	for range 2 {
		for _, p := range sessionMembers(pid) {
			_ = syscall.Kill(p, sig)
		}
	}
}

// sessionMembers lists the processes of session sid, from /proc.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == sid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold spaces.
		rest := string(stat)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		if fields := strings.Fields(rest); len(fields) >= 4 && fields[3] == strconv.Itoa(sid) {
			out = append(out, p)
		}
	}
	return out
}
