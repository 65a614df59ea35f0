package framework

import (
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Front plays a Service for the managers of one test: a stable loopback
// address (what runner pods are told to reach) that forwards each
// connection to a manager that is up. While none is (a manager restarting),
// a connection waits for one, up to frontWait, as a client retrying a
// Service with no endpoints would.
type Front struct {
	Addr string

	ln       net.Listener
	mu       sync.Mutex
	backends []string
	next     int
	// cut: every connection is dropped, as from a node cut off from the
	// Service; conns are the live ones.
	cut   bool
	conns map[net.Conn]bool
}

const frontWait = 30 * time.Second

// NewFront listens on a port the kernel picks.
func NewFront() (*Front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Front{Addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]bool{}}
	go f.serve()
	return f, nil
}

// Add makes addr a backend; Remove takes it out.
func (f *Front) Add(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = append(f.backends, addr)
}

func (f *Front) Remove(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = slices.DeleteFunc(f.backends, func(b string) bool { return b == addr })
}

// Close stops accepting.
func (f *Front) Close() { f.ln.Close() }

func (f *Front) serve() {
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(conn)
	}
}

func (f *Front) forward(conn net.Conn) {
	defer conn.Close()
	if !f.track(conn) {
		return
	}
	defer f.untrack(conn)
	deadline := time.Now().Add(frontWait)
	var backend net.Conn
	for backend == nil {
		if addr := f.pick(); addr != "" {
			backend, _ = net.DialTimeout("tcp", addr, time.Second)
		}
		if backend == nil {
			if time.Now().After(deadline) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	defer backend.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, backend); done <- struct{}{} }()
	<-done
}

func (f *Front) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.backends) == 0 {
		return ""
	}
	f.next++
	return f.backends[f.next%len(f.backends)]
}

// Cut drops every connection, now and until Heal: the network between the
// runner pods and the Service is cut. Unlike no manager being up, a client
// gets no refusal: its connections are reset.
func (f *Front) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
	for c := range f.conns {
		c.Close()
	}
}

// Heal ends Cut.
func (f *Front) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = false
}

func (f *Front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *Front) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}
