package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/retry"
)

// Claim and fencing: a run makes the state its own (Claim, ClaimPlanned)
// or checks it read-only, and every later write goes to exactly the head
// version it holds (updateHead).

// Claim makes the state this run's: it checks the state Secret belongs to
// the object, stamps it with holder (creating an empty one when there is no
// state yet) and remembers its version; writes of a run that claims after
// this one fail with ErrFenced. expectState refuses a missing state: the
// object was applied, and running on an empty state would create everything
// again.
func (s *StateStore) Claim(ctx context.Context, holder string, expectState bool) error {
	create := func() (bool, error) {
		head := s.newSecret(s.Object.State(), names.SecretTypeState)
		head.Annotations[AnnotationHolder] = holder
		created, err := s.secrets().Create(ctx, head, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("creating state secret: %w", err)
		}
		s.head, s.known = created, false
		return true, nil
	}
	// An object never applied has no state yet, as a rule. One that is
	// there (left by a first apply that failed) is read and claimed as
	// below, and so is one a claim whose answer was lost created.
	if s.New && !s.createTried {
		s.createTried = true
		if created, err := create(); created || err != nil {
			return err
		}
	}
	head, err := s.checkedHead(ctx, expectState)
	if err != nil {
		return err
	}
	if head == nil {
		created, err := create()
		if err == nil && !created {
			return fmt.Errorf("%w: the state Secret appeared while claiming it", ErrFenced)
		}
		return err
	}
	updated, err := s.secrets().Update(ctx, s.stamped(head, holder), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: the state Secret changed while claiming it", ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("claiming state secret: %w", err)
	}
	s.head, s.known = updated, false
	return nil
}

// stamped is a copy of head claimed by holder.
func (s *StateStore) stamped(head *corev1.Secret, holder string) *corev1.Secret {
	head = head.DeepCopy()
	head.Annotations[AnnotationHolder] = holder
	for k, v := range s.Labels { // a restored or moved object adopts its state
		head.Labels[k] = v
	}
	if !slices.Contains(head.Finalizers, names.StateFinalizer) {
		head.Finalizers = append(head.Finalizers, names.StateFinalizer)
	}
	return head
}

// ClaimPlanned claims, after CheckReadOnly, the state the check found: an
// apply plans read-only and claims only once its plan may apply, so that a
// plan that waits for an approver writes nothing. A state written since the
// check is not the one the plan was made from: the run is fenced.
func (s *StateStore) ClaimPlanned(ctx context.Context, holder string) error {
	if !s.readOnly {
		return errors.New("a planned claim follows a read-only check")
	}
	planned := s.head
	var err error
	if planned == nil {
		var created *corev1.Secret
		head := s.newSecret(s.Object.State(), names.SecretTypeState)
		head.Annotations[AnnotationHolder] = holder
		if created, err = s.secrets().Create(ctx, head, metav1.CreateOptions{}); err == nil {
			s.head, s.known, s.readOnly = created, false, false
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating state secret: %w", err)
		}
	} else {
		var updated *corev1.Secret
		if updated, err = s.secrets().Update(ctx, s.stamped(planned, holder), metav1.UpdateOptions{}); err == nil {
			s.head, s.readOnly = updated, false // the same state: what was read stays known
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("claiming state secret: %w", err)
		}
	}
	// This claim's own write, whose answer was lost, or another's.
	current, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading state secret: %w", err)
	}
	if current.Annotations[AnnotationHolder] != holder || !sameState(planned, current) {
		return ErrChangedSincePlan
	}
	s.head, s.readOnly = current, false
	s.known = s.known && planned != nil
	return nil
}

// sameState tells whether head holds the state planned held (none, when
// planned is nil).
func sameState(planned, head *corev1.Secret) bool {
	if planned == nil || !HasState(planned) {
		return !HasState(head)
	}
	return HasState(head) && head.Annotations[annotationStateSum] == planned.Annotations[annotationStateSum]
}

// CheckReadOnly makes the checks of Claim without writing, and refuses every
// later write: for runs that only plan, and for an apply until its plan may
// apply (ClaimPlanned).
func (s *StateStore) CheckReadOnly(ctx context.Context, _ string, expectState bool) error {
	s.readOnly = true
	head, err := s.checkedHead(ctx, expectState)
	if err != nil {
		return err
	}
	s.head = head
	return nil
}

// checkedHead reads the state Secret (nil when there is none) and refuses
// another object's, and a missing state when one is expected.
func (s *StateStore) checkedHead(ctx context.Context, expectState bool) (*corev1.Secret, error) {
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		head = nil
	case err != nil:
		return nil, fmt.Errorf("reading state secret: %w", err)
	default:
		if err := s.checkOwner(head); err != nil {
			return nil, err
		}
	}
	if expectState && (head == nil || !HasState(head)) {
		return nil, fmt.Errorf("%w: %s holds no state", ErrStateMissing, s.Object.State())
	}
	return head, nil
}

// checkOwner refuses a state Secret recorded for another object.
func (s *StateStore) checkOwner(head *corev1.Secret) error {
	name, ok := head.Annotations[names.AnnotationObjectName]
	if !ok {
		name = head.Labels[names.LabelObjectName] // written before the annotation existed
		if name == names.LabelValue(s.Object.Name) {
			name = s.Object.Name
		}
	}
	if name != s.Object.Name || head.Labels[names.LabelKind] != s.Object.Kind {
		return fmt.Errorf("%w: %s records %s %q as its owner", ErrOtherOwner, head.Name, head.Labels[names.LabelKind], name)
	}
	if head.Labels[names.LabelAbandoned] == "true" {
		// A former object of this name left it: taking it up is a decision.
		return fmt.Errorf("%w: %s is the abandoned state of a former object of this name", ErrOtherOwner, head.Name)
	}
	return nil
}

// updateHead writes head, fenced by its resourceVersion. When an answer is
// lost (the runner API's pod killed mid-request), the write may have landed:
// the head is read back and written tells whether it holds this write;
// writing again blindly would find a conflict with itself and fail the run.
// A conflict with another writer is ErrFenced.
func (s *StateStore) updateHead(ctx context.Context, head *corev1.Secret, written func(current *corev1.Secret) bool) (*corev1.Secret, error) {
	var updated *corev1.Secret
	uncertain := false
	err := retry.Transiently(ctx, func() error {
		if uncertain {
			current, err := s.secrets().Get(ctx, head.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if current.ResourceVersion != head.ResourceVersion {
				if written(current) && current.Annotations[AnnotationHolder] == head.Annotations[AnnotationHolder] {
					updated = current
					return nil
				}
				return ErrFenced
			}
		}
		var err error
		updated, err = s.secrets().Update(ctx, head, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return ErrFenced
		}
		uncertain = err != nil && retry.Transient(err)
		return err
	})
	return updated, err
}

// Holds says what a terraform state holds, for AnnotationHolds: its serial
// and how many instances of managed resources; "" when it is not a plain
// state (encrypted, or not JSON).
func Holds(state []byte) string {
	var st struct {
		Serial    *int `json:"serial"`
		Resources []struct {
			Mode      string            `json:"mode"`
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if json.Unmarshal(state, &st) != nil || st.Serial == nil {
		return ""
	}
	n := 0
	for _, r := range st.Resources {
		if r.Mode == "managed" {
			n += len(r.Instances)
		}
	}
	return fmt.Sprintf("serial %d, %d resources", *st.Serial, n)
}

func setHolds(sec *corev1.Secret, holds string) {
	if holds == "" {
		delete(sec.Annotations, AnnotationHolds)
		return
	}
	sec.Annotations[AnnotationHolds] = holds
}
