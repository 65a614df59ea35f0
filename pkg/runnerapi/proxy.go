package runnerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/pkg/names"
)

// Forwarding: an authorized request goes to the API server with the
// manager's rights, and the answer back as it came.

// forwardedQuery are the query parameters a run uses; the rest (watch,
// say) are dropped.
var forwardedQuery = []string{"resourceVersion", "fieldManager", "fieldValidation", "timeout"}

// forwardedQueryOf is the part of r's query the API server is given.
func forwardedQueryOf(r *http.Request) string {
	query := url.Values{}
	for _, k := range forwardedQuery {
		if v, ok := r.URL.Query()[k]; ok {
			query[k] = v
		}
	}
	return query.Encode()
}

// servePod answers with only the identity and phase of a pod of the same
// object: what telling a stale lock holder needs.
func (s *Server) servePod(ctx context.Context, w http.ResponseWriter, id *Identity, name string) {
	pod, err := s.Kube.CoreV1().Pods(id.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil && pod.Labels[names.LabelManagedBy] != names.ManagedByValue {
		// Not "not found": a holder whose label someone removed still
		// runs, and a runner reads "not found" as a lock free to take.
		err = apierrors.NewForbidden(corev1.Resource("pods"), name, errors.New("not a pod of CAPTF's"))
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	out := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, DeletionTimestamp: pod.DeletionTimestamp},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase}}
	writeJSON(w, http.StatusOK, out)
}

// forward sends the request to the API server with the manager's
// credentials and streams the answer back; it returns the answer's status
// code (0: none came).
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, method, path, query string, body []byte) int {
	target := s.host + path
	if query != "" {
		target += "?" + query
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return 0
	}
	// Only these headers: never the runner's Authorization, never an
	// Impersonate-* header.
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "captf-manager/runner-api")
	resp, err := s.client.Do(req)
	if err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return 0
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return resp.StatusCode
}

func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.APIVersion, st.Kind = "v1", "Status"
	// client-go, and the runner's own retries, wait as told.
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(st.Code), &st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
