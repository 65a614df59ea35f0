package runnerjob

import (
	"time"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Unfinished is a Job that may still run a pod, being deleted or not.
func Unfinished(jobs []*Cached) *Cached {
	for _, j := range jobs {
		if finished, _ := Finished(j); !finished {
			return j
		}
	}
	return nil
}

func Active(jobs []*Cached) *Cached {
	for _, j := range jobs {
		if finished, _ := Finished(j); !finished && j.DeletionTimestamp == nil {
			return j
		}
	}
	return nil
}

// Latest is the newest attempt of op for hash.
func Latest(jobs []*Cached, op infrav1.Operation, hash string) *Cached {
	var latest *Cached
	for _, j := range jobs {
		if j.Operation != op || j.InputsHash != hash {
			continue
		}
		if latest == nil || j.Attempt > latest.Attempt {
			latest = j
		}
	}
	return latest
}

// FinishTime is when job finished (its creation while it runs).
func FinishTime(job *Cached) time.Time {
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.Time
	}
	if job.Status.Finished {
		return job.Status.EndTime.Time
	}
	return job.CreationTimestamp.Time
}
