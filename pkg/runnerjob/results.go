package runnerjob

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/captf/captf/pkg/run"
)

// keptResults bounds the results Results keeps: the Jobs that finish
// between the engine's read of one and the Job metrics' (a few seconds);
// a result larger than keptResultBytes (large outputs) is not kept, so
// that they take at most 4 MiB.
const (
	keptResults     = 256
	keptResultBytes = 16 << 10
)

// ErrUnreadableResult: a result Secret holds nothing CAPTF can read as a
// result (someone else wrote it).
var ErrUnreadableResult = errors.New("unreadable result")

// Results reads the results runners write, and keeps the last ones read by
// Job: the controller of a finished Job's object reads its result to record
// it, and the Job metrics count the same one; the second reader needs no
// request. A Job's result does not change: its runner writes it once, as
// it ends (the runner API hands it over as it forwards the write, see
// Wrote). A result not found, not readable or large is not kept.
type Results struct {
	Kube kubernetes.Interface

	mu    sync.Mutex
	byJob map[types.UID]*run.Result
	order []types.UID // oldest first
	// reading are the reads under way: both readers see a Job finish at
	// the same moment, and the second waits for the first's answer.
	reading map[types.UID]*resultRead
}

type resultRead struct {
	done chan struct{}
	res  *run.Result
	err  error
}

// Read returns the result Secret name in namespace holds for job.
func (r *Results) Read(ctx context.Context, namespace, name string, job types.UID) (*run.Result, error) {
	r.mu.Lock()
	if res, ok := r.byJob[job]; ok {
		r.mu.Unlock()
		return res, nil
	}
	if read, ok := r.reading[job]; ok {
		r.mu.Unlock()
		select {
		case <-read.done:
			return read.res, read.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	read := &resultRead{done: make(chan struct{})}
	if r.reading == nil {
		r.reading = map[types.UID]*resultRead{}
	}
	r.reading[job] = read
	r.mu.Unlock()

	var small bool
	read.res, small, read.err = r.read(ctx, namespace, name)
	r.mu.Lock()
	delete(r.reading, job)
	if read.err == nil && small {
		r.keep(job, read.res)
	}
	r.mu.Unlock()
	close(read.done)
	return read.res, read.err
}

// read reads a result from the API, and says whether it is small enough
// to keep.
func (r *Results) read(ctx context.Context, namespace, name string) (*run.Result, bool, error) {
	sec, err := r.Kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	res, err := run.ResultOf(sec.Data)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrUnreadableResult, err)
	}
	return res, len(sec.Data[run.KeyResult]) <= keptResultBytes, nil
}

// Wrote keeps the result a runner has just written for job, the data of
// its result Secret as the API server took it (the runner API forwarded
// the write): the readers of the finished Job need no request. A result
// unreadable or large is left to them to read.
func (r *Results) Wrote(job types.UID, data map[string][]byte) {
	if len(data[run.KeyResult]) > keptResultBytes {
		return
	}
	res, err := run.ResultOf(data)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byJob[job]; ok {
		r.byJob[job] = res // written again: the runner's retry of a write whose answer it lost
		return
	}
	r.keep(job, res)
}

// keep keeps res for job; r.mu is held.
func (r *Results) keep(job types.UID, res *run.Result) {
	if job == "" {
		return
	}
	if r.byJob == nil {
		r.byJob = map[types.UID]*run.Result{}
	}
	if _, ok := r.byJob[job]; ok {
		return
	}
	if len(r.order) == keptResults {
		delete(r.byJob, r.order[0])
		r.order = r.order[1:]
	}
	r.byJob[job] = res
	r.order = append(r.order, job)
}
