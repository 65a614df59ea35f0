package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// FuzzAdmissionReview: any request body gets an HTTP answer, never a panic;
// a review that decodes gets a response with its UID. Seeds live in
// testdata/fuzz/FuzzAdmissionReview.
func FuzzAdmissionReview(f *testing.F) {
	h := &Handler{ManagerUser: managerUser, Cluster: func(context.Context, string, string) (bool, bool, error) { return true, false, nil }}
	mux := h.Mux()
	f.Fuzz(func(t *testing.T, kindIndex uint8, body []byte) {
		kind := Kinds[int(kindIndex)%len(Kinds)]
		r := httptest.NewRequest(http.MethodPost, Path(kind), bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		review, err := DecodeReview(body)
		if err != nil {
			if w.Code == http.StatusOK {
				t.Fatalf("undecodable body answered 200: %s", w.Body)
			}
			return
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("no AdmissionReview response (%d): %v %s", w.Code, err, w.Body)
		}
		if out.Response.UID != review.Request.UID {
			t.Fatalf("response UID %q, request UID %q", out.Response.UID, review.Request.UID)
		}
	})
}

// FuzzValidate: the validators take any object and old object that decode,
// without panic. Seeds live in testdata/fuzz/FuzzValidate.
func FuzzValidate(f *testing.F) {
	f.Fuzz(func(t *testing.T, obj, old []byte) {
		fuzzKind(obj, old, ValidateTerraformCluster)
		fuzzKind(obj, old, ValidateTerraformClusterTemplate)
		fuzzKind(obj, old, ValidateTerraformMachine)
		fuzzKind(obj, old, ValidateTerraformMachinePool)
		fuzzKind(obj, old, ValidateTerraformMachineTemplate)
		fuzzKind(obj, old, ValidateTerraformMachinePoolTemplate)
	})
}

func fuzzKind[T any, E any](obj, old []byte, validate func(obj, old *T) E) {
	o := new(T)
	if json.Unmarshal(obj, o) != nil {
		return
	}
	validate(o, nil)
	p := new(T)
	if json.Unmarshal(old, p) == nil {
		validate(o, p)
	}
}
