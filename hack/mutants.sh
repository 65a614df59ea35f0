#!/usr/bin/env bash
# Breaks each guard below on purpose, in a scratch copy of the tree, and runs
# the unit tests: a mutant no test fails on is a guard no test guards. Ends
# with "N mutants, M caught"; exits 1 unless every mutant was caught.
#
#   hack/mutants.sh            every mutant
#   hack/mutants.sh NAME...    only these
#   hack/mutants.sh --check    only that every mutant's text is still found
#                              once (seconds; make verify runs it, so a
#                              mutant cannot go stale unseen)
#   hack/mutants.sh --since REV  the mutants of files changed since REV
#                              (before a landing: all of them take hours)
#
# A mutant is one or more literal replacements in one file, each of a text
# found there exactly once. One whose text is no longer found is reported
# stale (and counts as not caught): fix it with the code.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
check=false
changed=
case ${1:-} in
--check)
	check=true
	shift
	;;
--since)
	changed=" $(git diff --name-only "$2" -- pkg cmd | tr '\n' ' ') "
	shift 2
	;;
esac
scratch=$(mktemp -d "${TMPDIR:-/tmp}/captf-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
git ls-files -z --cached --others --exclude-standard | grep -zv '^bin/' | xargs -0 cp --parents -t "$scratch"
cd "$scratch"

total=0 caught=0
declare -a missed=()
only=("$@")

# mutant NAME FILE FROM TO [FROM TO]...: replace the one occurrence of each
# FROM in FILE by its TO, run the unit tests, put FILE back.
mutant() {
	local name=$1 file=$2
	shift 2
	if ((${#only[@]})) && [[ ! " ${only[*]} " == *" $name "* ]]; then
		return
	fi
	if [[ -n $changed && $changed != *" $file "* ]]; then
		return
	fi
	total=$((total + 1))
	cp "$file" "$file.orig"
	while (($#)); do
		if ! FROM=$1 TO=$2 perl -0pi -e 'my $n = s/\Q$ENV{FROM}\E/$ENV{TO}/g; die "stale\n" unless $n == 1' "$file" 2>/dev/null; then
			echo "STALE   $name: $file no longer holds its text once"
			missed+=("$name (stale)")
			mv "$file.orig" "$file"
			return
		fi
		shift 2
	done
	if $check; then
		caught=$((caught + 1))
		mv "$file.orig" "$file"
		return
	fi
	local out
	if out=$(go test -trimpath ./pkg/... ./cmd/... 2>&1); then
		echo "MISSED  $name ($file)"
		missed+=("$name")
	elif grep -q '\[build failed\]\|^# ' <<<"$out" && ! grep -q '^--- FAIL' <<<"$out"; then
		echo "BROKEN  $name: the mutant does not build"
		grep -m5 '\.go:' <<<"$out" | sed 's/^/        /'
		missed+=("$name (does not build)")
	else
		caught=$((caught + 1))
		echo "caught  $name by $(grep -o '^--- FAIL: [^ ]*' <<<"$out" | sed 's/--- FAIL: //' | sort -u | head -3 | paste -sd, -)"
	fi
	mv "$file.orig" "$file"
}

# The controllers' guards against duplicate creates and stale caches.
mutant expectations-always-satisfied pkg/controller/expectations.go \
	'return !ok || e.clock.Since(exp.at) > ExpectationsTimeout' 'return true || !ok || e.clock.Since(exp.at) > ExpectationsTimeout'
mutant written-never-behind pkg/controller/written.go \
	'return err == nil && v < w.versions[key]' 'return false && err == nil && v < w.versions[key]'


# A second Job for the same object and hash: the create not expected, so a
# sync on a cache that has not seen it yet creates it again.
mutant second-job-created pkg/controller/workspace/start.go \
	'	e.Expectations.ExpectJob(r.Key, job.Name)
	err := e.JobControl.Create(ctx, job)' '	err := e.JobControl.Create(ctx, job)'

# The run's inputs written after its Job: the runner may start before they
# exist.
mutant run-inputs-after-job pkg/controller/workspace/start.go \
	'	if data != nil {
		if err := e.createRunInputs(ctx, r, job, data); err != nil {' '	if false {
		if err := e.createRunInputs(ctx, r, job, data); err != nil {' \
	'	err := e.JobControl.Create(ctx, job)
' '	err := e.JobControl.Create(ctx, job)
	if data != nil {
		_ = e.createRunInputs(ctx, r, job, data)
	}
'

# A state write that met another run's claim re-reads the state and
# overwrites it: two runs would write one state.
mutant conflict-reread-and-overwritten pkg/statestore/claim.go \
	'		if apierrors.IsConflict(err) {
			return ErrFenced
		}' '		if apierrors.IsConflict(err) {
			current, gerr := s.secrets().Get(ctx, head.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			head.ResourceVersion = current.ResourceVersion
			updated, err = s.secrets().Update(ctx, head, metav1.UpdateOptions{})
		}'

# An approval of the plan applied last passed on: it would approve any later
# plan that hashes alike.
mutant gate-keeps-applied-approval pkg/approval/approval.go \
	'if v := annotations[key]; v != st.AppliedPlanHash {' 'if v := annotations[key]; v != st.AppliedPlanHash || true {'

# Inputs whose values the runner must keep out of logs and outputs.
mutant secret-variable-not-sensitive pkg/controller/workspace/inputs.go \
	'sensitive := v.Sensitive || v.ValueFrom.SecretKeyRef != nil' 'sensitive := v.Sensitive'
mutant bootstrap-data-not-sensitive pkg/controller/workspace/inputs.go \
	'range []string{"captf_bootstrap_data", "captf_bootstrap_format"}' 'range []string{}'

# The runner applies a plan the gate holds for an approval.
mutant runner-applies-while-gate-waits pkg/runner/runner.go \
	'if needed := gate.Needed(res.Plan); needed != "" {' 'if needed := gate.Needed(res.Plan); needed != "" && false {'

# A flag the manager means and the runner never reads.
mutant runner-not-told-state-expected pkg/run/spec.go \
	'func(s *Spec) bool { return s.ExpectState }}' 'func(s *Spec) bool { return false }}'

# The lock of a holder whose pod is gone is taken before its Lease lapsed:
# a force-deleted runner may still be running.
mutant lock-taken-before-lapse pkg/statestore/lock.go \
	'l.clock().Since(renewed.Time) < time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second' 'l.clock().Since(renewed.Time) < 0'

# A renewal overwrites the Lease another run took once this one's lapsed.
mutant lock-renewed-after-taken pkg/statestore/lock.go \
	'	if holder := ptrValue(lease.Spec.HolderIdentity); holder != l.Holder || types.UID(lease.Annotations[annotationHolderUID]) != l.HolderUID {' \
	'	if holder := ptrValue(lease.Spec.HolderIdentity); false {'

# A Job runs inputs known only by their remembered hash.
mutant job-runs-remembered-hash pkg/controller/workspace/apply.go \
	'	if in.HashOnly {' '	if false {'

# A Job starts on a remembered hash that what was read no longer matches.
mutant remembered-hash-not-checked pkg/controller/workspace/apply.go \
	'		if rendered.Hash != in.Hash {' '		if false {'

# A resync keeps the remembered inputs: a changed ConfigMap is never read.
mutant resync-keeps-rendered-inputs pkg/controller/workspace/controller.go \
	'		c.rendered.forget(cache.MetaObjectToName(n))' '		_ = n'

# The spec's module or variables, the owner's inputs or its bootstrap data
# Secret's name changed, and the remembered hash still answers.
mutant rendered-from-misses-spec pkg/controller/workspace/inputs.go \
	'obj.Workspace(), inputs, bootstrap)' 'nil, inputs, bootstrap)'
mutant rendered-from-misses-owner pkg/controller/workspace/inputs.go \
	'obj.Workspace(), inputs, bootstrap)' 'obj.Workspace(), nil, bootstrap)'
mutant rendered-from-misses-bootstrap-secret pkg/controller/workspace/inputs.go \
	'obj.Workspace(), inputs, bootstrap)' 'obj.Workspace(), inputs, bootstrap[:0])'

# The block-move annotation's removal is left unwritten when nothing else
# in the sync updates the object.
mutant unblock-never-written pkg/controller/workspace/controller.go \
	'	if err == nil && s.Unwritten {' '	if false {'

# spec.protect: a protected change applies, a pattern covers nothing
# inside it, or the runner is never told the patterns.
mutant runner-applies-protected-change pkg/runner/runner.go \
	'if protected := gate.Protected(res.Plan); len(protected) > 0 {' 'if protected := gate.Protected(res.Plan); len(protected) > 0 && false {'
mutant protect-covers-only-itself pkg/run/protect.go \
	'if (address[i] == '"'"'.'"'"' || address[i] == '"'"'['"'"') && globMatch(pattern, address[:i]) {' 'if false {'
mutant runner-not-told-protect pkg/run/spec.go \
	'func(s *Spec) bool { return len(s.Protect) > 0 }}' 'func(s *Spec) bool { return false }}'

# A runner writes a ConfigMap other than its run's record.
mutant runner-writes-any-configmap pkg/runnerapi/access.go \
	'cm.Name != want {' 'cm.Name != want && false {'
# The plugin approves a plan other than the one it showed.
mutant plugin-approves-changed-plan pkg/plugin/plan.go \
	'now == nil || now.Hash != hash || current != annotation' 'now == nil || current != annotation'
# A record keeps a value terraform marks sensitive.
mutant record-keeps-marked-values pkg/runner/record.go \
	'	c["after"] = mask(c["after"], c["after_sensitive"])' ''

# A restore: provider IDs under a running Cluster, or by anyone before its
# Cluster exists; a machine restored with provider IDs but no state applies.
mutant restore-into-running-cluster pkg/webhook/admission.go \
	'	return paused || !found, nil' '	return paused || !found || true, nil'
mutant restore-without-move-right pkg/webhook/admission.go \
	'	if err != nil || !ok {
		return false, err
	}
	found, paused' '	if err != nil || !ok && false {
		return false, err
	}
	found, paused'
mutant provider-ids-mean-nothing pkg/controller/workspace/gather.go \
	' || providerid.HoldsInstances(obj) {' ' || providerid.HoldsInstances(nil) {'
mutant restored-results-left pkg/controller/workspace/state.go \
	'				if len(s.OwnerReferences) == 0 {' '				if false {'
mutant restored-inputs-left pkg/controller/workspace/state.go \
	'				leftovers = append(leftovers, s)
				continue' '				continue'
mutant restored-records-left pkg/controller/workspace/state.go \
	'			if len(r.OwnerReferences) == 0 {' '			if false {'
# The plane's alerts lose their inputs.
mutant no-certificate-expiry pkg/webhook/server.go \
	'	return c.Leaf.NotAfter, nil' '	return time.Time{}, nil'
mutant conflict-counted-as-failure pkg/controller/loop.go \
	'			l.reconciles.Observe(seconds, metrics.SyncConflicted)' '			l.reconciles.Observe(seconds, metrics.SyncFailed)'
mutant waiting-since-unreported pkg/controller/workspace/collector.go \
	'			gauge(ch, waitingSinceDesc, float64(c.LastTransitionTime.Unix()), kind, ns, name, c.Type)' '			_ = c'

# What the state Secrets' cache keeps must decide as the Secret would.
mutant state-meta-always-protected pkg/controller/workspace/state.go \
	'Protected: slices.Contains(m.GetFinalizers(), names.StateFinalizer),' 'Protected: true,'
mutant state-meta-names-nothing pkg/controller/workspace/state.go \
	's.ObjectName, s.NamesObject = annotations[names.AnnotationObjectName]' 's.ObjectName = annotations[names.AnnotationObjectName]'
# Run inputs handed over: to the run of their own object only, and once.
mutant inputs-handed-to-any-object pkg/runnerapi/server.go \
	'sec != nil && sec.Labels[names.LabelObjectUID] == string(id.ObjectRef.UID)' 'sec != nil && (sec.Labels[names.LabelObjectUID] == string(id.ObjectRef.UID) || true)'
mutant inputs-handed-twice pkg/controller/workspace/handover.go \
	'	k.forget(key)
	return sec' '	return sec'
# Cached Terraform objects without decoding's spare room.
mutant no-room-given-back pkg/manager/manager.go \
	'st.Conditions, st.LastJobs = exactly(st.Conditions), exactly(st.LastJobs)' '_, _ = exactly(st.Conditions), exactly(st.LastJobs)'
# Cluster API objects cached as what CAPTF reads: the control-plane label
# kept, a copy sharing nothing with the cache.
mutant capi-control-plane-label-dropped pkg/capi/object.go \
	'o.Labels = map[string]string{ControlPlaneLabel: v}' '_ = v'
mutant capi-copy-shares-refs pkg/capi/object.go \
	'		out.Spec.InfrastructureRef = &ref' '		_ = ref'
# Jobs indexed in buckets of object UIDs: a bucket's other objects' Jobs
# are not this object's.
mutant jobs-of-the-whole-bucket pkg/runnerjob/job.go \
	'if !ok || job.ObjectUID != obj.GetUID() || job.Namespace != obj.GetNamespace() {' 'if !ok || job.Namespace != obj.GetNamespace() {'
mutant capi-informer-dynamic-lister pkg/manager/informers.go \
	'		inf = capiInformer{inf, gvr}' '		_ = capiInformer{inf, gvr}'
# A cached Job keeps its controller, why it failed, and an uncounted pod.
mutant cached-job-without-controller pkg/runnerjob/job.go \
	'		c.Controller = JobController{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}' '		_ = owner'
mutant cached-job-without-failure-message pkg/runnerjob/job.go \
	'				c.Status.EndMessage = cond.Message' ''
mutant cached-job-without-uncounted-pod pkg/runnerjob/job.go \
	'		c.Status.Uncounted = true' ''
# The manager's caches: filtered as before, and no namespace index.
mutant informers-with-namespace-index pkg/manager/informers.go \
	'func noIndexes() cache.Indexers { return cache.Indexers{} }' 'func noIndexes() cache.Indexers { return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc} }'
mutant captf-informers-unfiltered pkg/manager/informers.go \
	'return newInformer(c, namespace, resync, noIndexes(), captfTweak)' 'return newInformer(c, namespace, resync, noIndexes(), nil)'
mutant capi-informers-unfiltered pkg/manager/informers.go \
	'NewFilteredDynamicInformer(f.client, gvr, f.namespace, f.resync, noIndexes(), f.tweak)' 'NewFilteredDynamicInformer(f.client, gvr, f.namespace, f.resync, noIndexes(), nil)'
# An owner counts only when its infrastructureRef names the object.
mutant owner-not-named pkg/capi/capi.go \
	'if named, ok := k.InfrastructureRef(owner, objGroup, objKind); ok && named.Name == obj.GetName() {' 'if true {'
# The fair shares say when a request waited behind other peers' slots, and
# the runner API whose budget of new tokens ran out.
mutant slot-wait-within-share pkg/fairshare/fairshare.go \
	'within := s.held[key] < s.perKey' 'within := false'
mutant token-budget-shared-for-source pkg/fairshare/fairshare.go \
	'		return OverSharedRate' '		return OverKeyRate'
mutant first-request-not-retried pkg/runner/runner.go \
	'	err := retry.Transiently(ctx, func() (err error) {
		inputs, err = r.Client' '	err := func(f func() error) error { return f() }(func() (err error) {
		inputs, err = r.Client'
mutant no-retry-after-header pkg/runnerapi/proxy.go \
	'w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))' '_ = strconv.Itoa'
# A new token is checked before it costs a TokenReview.
mutant token-expiry-unchecked pkg/runnerapi/tokens.go \
	'case claims.Expiry == 0 || now.Unix() >= claims.Expiry:' 'case false:'
mutant token-signature-unchecked pkg/runnerapi/tokens.go \
	'if header.Algorithm != "RS256" || rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {' 'if header.Algorithm != "RS256" {'
mutant token-unknown-key-trusted pkg/runnerapi/tokens.go \
	'return true, fmt.Errorf("%w: %q", errKeyNotKnown, header.KeyID)' 'return false, nil'
mutant token-junk-spends-budget pkg/runnerapi/authenticate.go \
	'ns, verified, err := claimedNamespace(ctx, token, now, s.keys)' 'ns, verified, err := claimedNamespace(ctx, token, now, s.keys); err = nil'
# Terraform gets one SIGTERM, however many reasons to stop come.
mutant second-interrupt pkg/runner/terraform.go \
	'r.child.Process != nil && r.interrupted != r.child {' 'r.child.Process != nil {'
# Issue 50, item 1: CAPTF's finalizers and the protection a state was kept
# under stay, whoever writes.
mutant finalizer-anyone-strips pkg/webhook/admission.go \
	'if !slices.Contains(old.Metadata.Finalizers, finalizer) || slices.Contains(obj.Metadata.Finalizers, finalizer) {' 'if true {'
mutant finalizer-any-verb pkg/webhook/admission.go \
	'if ok {
				return nil, nil
			}' 'if ok || true {
				return nil, nil
			}'
mutant runner-drops-state-finalizer pkg/runnerapi/access.go \
	'&& !slices.Contains(sec.Finalizers, names.StateFinalizer) {' '&& false {'
mutant runner-rewrites-protection pkg/runnerapi/access.go \
	'if head.Annotations[names.AnnotationProtection] != recorded {' 'if head.Annotations[names.AnnotationProtection] != recorded && false {'
mutant protection-not-inherited pkg/controller/workspace/protection.go \
	'if p != nil && p.UID != obj.GetUID() && !covers(r.Gate, p)' 'if false && p != nil'
mutant protection-covered-loosely pkg/controller/workspace/protection.go \
	'if !slices.Contains(g.Protect, pattern) {
			return false' 'if !slices.Contains(g.Protect, pattern) && false {
			return false'
mutant protection-adopted-by-any pkg/controller/workspace/protection.go \
	'obj.GetAnnotations()[infrav1.AnnotationAdoptState] != string(p.UID)' 'obj.GetAnnotations()[infrav1.AnnotationAdoptState] == ""'
mutant protection-recorded-under-a-job pkg/controller/workspace/protection.go \
	'if slices.ContainsFunc(r.Jobs, func(j *runnerjob.Cached) bool { finished, _ := runnerjob.Finished(j); return !finished }) {' 'if slices.ContainsFunc(r.Jobs, func(j *runnerjob.Cached) bool { finished, _ := runnerjob.Finished(j); return !finished }) && false {'
mutant protection-recorded-while-held pkg/controller/workspace/protection.go \
	'		return true, nil
	}
	if c := meta.FindStatusCondition' '	}
	if c := meta.FindStatusCondition'
# Issue 50, item 5: the plugin prints only what a terminal shows as text.
mutant plugin-prints-format-characters pkg/plugin/printable.go \
	'case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r)' 'case unicode.Is(unicode.Zl, r)'
mutant plugin-prints-controls pkg/plugin/printable.go \
	'case r < 0x100 && unicode.IsControl(r):' 'case r < 0x20 && r != 0x1b:'
mutant plugin-drops-split-characters pkg/plugin/printable.go \
	'p.pending = append([]byte(nil), data...)' 'p.pending = nil'
# Issue 50, item 2: a drift check writes none of the state family.
mutant drift-writes-state pkg/runnerapi/access.go \
	'if id.ReadOnly && method != http.MethodGet && id.Object.HoldsState(name) {' 'if false {'
mutant drift-creates-state pkg/runnerapi/access.go \
	'if id.ReadOnly && id.Object.HoldsState(sec.Name) {' 'if false {'
# Issue 50, item 6: heredoc lines, env from Secrets, one buffer a stream.
mutant redact-no-heredoc-lines pkg/runner/redact.go \
	'secrets = append(secrets, strings.TrimSpace(line))' 'secrets = append(secrets, strings.TrimSpace(line)[:0])'
mutant redact-no-env pkg/runner/redact.go \
	'name == s || isPattern && strings.HasPrefix(name, prefix)' 'name == s || isPattern && strings.HasPrefix(name, prefix) && false'
mutant redact-streams-share-a-buffer pkg/runner/terraform.go \
	'ow, ew := r.redact.Writer(log), r.redact.Writer(log)' 'ow := r.redact.Writer(log); ew := ow'
mutant env-from-secrets-untold pkg/runnerjob/job.go \
	'sensitive = append(sensitive, e.Name)' 'plain = append(plain, e.Name)'
# Issue 50, item 7: what one review may cost the webhook.
mutant webhook-bounds-unchecked pkg/webhook/admission.go \
	'if int(n) > max {' 'if false {'
mutant webhook-budget-per-source-only pkg/webhook/admission.go \
	'h.accessReviews.TryAccept(source+"\x00"+user.Username) != fairshare.Accepted ||' ''
# (One source's share of the decision slots is not a mutant: its share of
# the reading slots, 8, which it holds until answered, bounds it as well.)
mutant webhook-no-deadline pkg/webhook/admission.go \
	'return min(d, maxDecisionTimeout)' 'return maxDecisionTimeout'
mutant webhook-bounds-never-ratchet pkg/webhook/admission.go \
	'} else if len(errs) > 0 && !sameSpec(req) {' '} else if len(errs) > 0 && true {'

# Issue 50, item 2: code no approver accepted never runs.
mutant runner-runs-unapproved-code pkg/runner/runner.go \
	'if mods := r.Config.ApprovedModules; len(mods) > 0 && !slices.Contains(mods, res.Module.Digest) {' 'if mods := r.Config.ApprovedModules; false && len(mods) > 0 {'
mutant module-digest-skips-content pkg/runner/code.go \
	'fmt.Fprintf(digest, "%s %q %s\n", kind, rel, sum)' 'fmt.Fprintf(digest, "%s %q\n", kind, rel)'
mutant module-digest-skips-mode pkg/runner/code.go \
	'kind = "x"' 'kind = "f"'
mutant gate-forgets-applied-code pkg/approval/approval.go \
	'g.Modules = []string{st.AppliedModule}' '_ = st.AppliedModule'
mutant unrecorded-code-ungated pkg/approval/approval.go \
	'g.Modules = []string{UnrecordedModule}' ''
mutant unrecorded-code-never-runs pkg/controller/workspace/start.go \
	'g != nil && !(g.Unrecorded() && (data == nil || hash == r.Obj.WorkspaceStatus().AppliedInputsHash))' 'g != nil'
mutant unrecorded-code-never-learnt pkg/controller/workspace/status.go \
	'if st.AppliedModule == "" && st.AppliedInputsHash != "" && res.Module != nil {' 'if false {'
mutant module-approval-ignored pkg/approval/approval.go \
	'if g.ApprovedModule != "" && !slices.Contains(out, g.ApprovedModule) {' 'if false {'
mutant module-approval-kept pkg/approval/approval.go \
	'infrav1.AnnotationApproveModule: module}' 'infrav1.AnnotationApproveModule: ""}'
mutant module-hold-retries-at-once pkg/controller/workspace/gate.go \
	'if r.Gate.ModuleRunnable(res.Module.Digest) {' 'if true {'
mutant plan-hash-ignores-code pkg/run/plan.go \
	'hp := hashedPlan{Module: module}' 'hp := hashedPlan{}'
mutant plan-hash-ignores-outputs pkg/run/plan.go \
	'hp.Outputs = append(hp.Outputs, c)' '_ = c'
mutant webhook-module-digest-unchecked pkg/webhook/validate.go \
	'case !moduleDigest.MatchString(v):' 'case false:'
mutant webhook-module-approval-on-machines pkg/webhook/validate.go \
	"case !gated:
			errs = append(errs, field.Forbidden(path.Key(infrav1.AnnotationApproveModule)" "case false:
			errs = append(errs, field.Forbidden(path.Key(infrav1.AnnotationApproveModule)"

mutant module-links-anywhere pkg/runner/code.go \
	'if err != nil || inside == ".." || strings.HasPrefix(inside, "../") || isRunnerFile(filepath.ToSlash(inside)) {' 'if err != nil || inside == "" {'
mutant git-metadata-kept pkg/runner/code.go \
	'err = errors.Join(err, os.RemoveAll(path))' 'err = errors.Join(err, os.RemoveAll(path+".kept"))'
mutant plugin-shows-any-plan-record pkg/plugin/objects.go \
	'if r.vouched && r.Plan != nil' 'if r.Plan != nil'
mutant plugin-lists-any-module-record pkg/plugin/module.go \
	'if rec.vouched && rec.Module != nil' 'if rec.Module != nil'
mutant record-digest-unchecked pkg/plugin/objects.go \
	'return want != "" && want == run.RecordDigest(rec.data, rec.binary)' 'return want != ""'
mutant record-digest-unrecorded pkg/controller/workspace/status.go \
	'ref.Record, ref.RecordDigest = res.Record, res.RecordDigest' 'ref.Record = res.Record'
mutant caches-share-one-index-map pkg/manager/informers.go \
	'func noIndexes() cache.Indexers { return cache.Indexers{} }' 'var shared = cache.Indexers{}

func noIndexes() cache.Indexers { return shared }'
mutant cluster-members-not-enqueued pkg/controller/workspace/controller.go \
	'	for _, o := range members {
		c.enqueue(o)
	}' '	_ = members'
mutant record-forgotten-on-resync pkg/controller/workspace/status.go \
	'if res == nil && st.LastJobs[i].Name == ref.Name {' 'if false {'
mutant vouched-records-pruned pkg/controller/workspace/records.go \
	'if kept[k] < limit || vouched[rec.Name] {' 'if kept[k] < limit {'
mutant inline-values-unbounded pkg/webhook/validate.go \
	'grew := func(n int, was func() int) bool { return n > MaxInlineBytes && (old == nil || n > was()) }' 'grew := func(n int, was func() int) bool { return false && n > MaxInlineBytes && (old == nil || n > was()) }'
mutant inline-bound-never-ratchets pkg/webhook/validate.go \
	'return n > MaxInlineBytes && (old == nil || n > was())' 'return n > MaxInlineBytes'
mutant status-outputs-unbounded pkg/controller/workspace/controller.go \
	'if n > MaxStatusOutputBytes {' 'if n < 0 {'
mutant restore-takes-any-backup pkg/plugin/state.go \
	'(len(args) == 1 && list[i].kind() == "backup")' '(len(args) == 1 && !list[i].rescued)'
mutant module-overrides-the-backend pkg/runner/code.go \
	'if base != name && (base == "override" || strings.HasSuffix(base, "_override")) {' 'if base != name && false {'

# The caches keep only the annotations the controllers read, and the
# controllers write by patch from the version they read.
mutant cache-keeps-every-annotation pkg/controller/workspace/patch.go \
	'if !cachedAnnotations[k] {' 'if false {'
mutant cache-keeps-long-values pkg/controller/workspace/patch.go \
	'if len(v) > maxCachedAnnotation {' 'if false {'
mutant webhook-any-adopt-value pkg/webhook/validate.go \
	'ok && !objectUID.MatchString(v) {' 'ok && v == "" {'
mutant patch-without-version pkg/controller/workspace/patch.go \
	'm["resourceVersion"] = was.GetResourceVersion()' '_ = was'
mutant patch-drops-every-annotation pkg/controller/workspace/patch.go \
	'ok && !isObject(m["annotations"]) {' 'ok && false {'

# Runs that only plan (drift checks, unapproved applies under Manual) run
# as the plan ServiceAccount, checked as any runner's; approved ones do not.
mutant plan-account-unused pkg/runnerjob/account.go \
	'if onlyPlans && jp.PlanServiceAccountName != "" {' 'if false {'
mutant plan-account-not-for-unapproved-applies pkg/runnerjob/account.go \
	'op == infrav1.OperationApply && gate == infrav1.ApprovalPolicyManual && approvedPlan == ""' 'false && approvedPlan == ""'
mutant plan-account-for-approved-applies pkg/runnerjob/account.go \
	'approvedPlan == "" && approvedDestructivePlan == ""' 'true'
mutant plan-account-unchecked-for-applies pkg/controller/workspace/gather.go \
	'plans = runnerjob.OnlyPlans(op, g.Policy, g.ApprovedPlan, g.ApprovedDestructivePlan, policy)' 'plans = false'

# The runner's own settings cannot come from an envFrom the writer edits.
mutant runner-runs-any-binary pkg/runner/terraform.go \
	'return p, r.checkTerraform(p)' 'return p, nil'
mutant runner-api-from-envfrom pkg/runnerjob/job.go \
	'env = append(env, corev1.EnvVar{Name: run.EnvRunnerAPI, Value: s.RunnerAPI}, corev1.EnvVar{Name: run.EnvRunnerAPICA, Value: s.RunnerAPICA})' 'env = append(env, corev1.EnvVar{Name: run.EnvRunnerAPI, Value: s.RunnerAPI})'

mutant runner-takes-command-env pkg/runner/runner.go \
	'if why := run.ForbiddenEnv(name, value, r.Config.WorkDir); why != "" {' 'if why := run.ForbiddenEnv(name, value, r.Config.WorkDir); false && why != "" {'
mutant webhook-takes-command-env pkg/webhook/validate.go \
	'case run.ForbiddenEnv(e.Name, e.Value, run.JobWorkDir) != "":' 'case false:'

# Only the runner writes: the module's code holds the pod's token, not the
# Job's write key; an apply claims the state only once its plan may apply.
mutant token-alone-writes pkg/runnerapi/access.go \
	'if r.Method != http.MethodGet && !id.writes(r) {' 'if false {'
mutant any-write-key-passes pkg/runnerapi/access.go \
	'return id.Keyless || run.WriteKeyMatches(id.WriteKey, r.Header.Get(run.HeaderWriteKey))' 'return true'
mutant write-key-inherited pkg/runner/main.go \
	'if err := os.Unsetenv(run.EnvWriteKey); err != nil {' 'if err := error(nil); err != nil {'
mutant runner-dumpable pkg/runner/main.go \
	'if err := undumpable(); err != nil {' 'if err := error(nil); err != nil {'
mutant apply-claims-before-it-plans pkg/runner/runner.go \
	'return r.Config.Operation == infrav1.OperationDrift || r.Config.Operation == infrav1.OperationApply' 'return r.Config.Operation == infrav1.OperationDrift'
mutant planned-claim-takes-a-changed-state pkg/statestore/claim.go \
	'if current.Annotations[AnnotationHolder] != holder || !sameState(planned, current) {' 'if false {'
mutant job-without-write-key pkg/runnerjob/job.go \
	'return append(env, corev1.EnvVar{Name: run.EnvWriteKey, Value: s.WriteKey})' 'return env'
mutant jobs-share-a-write-key pkg/controller/workspace/start.go \
	'WriteKey: run.NewWriteKey(), PlanPolicy: policy}' 'WriteKey: run.NewWriteKey()[:0] + "same", PlanPolicy: policy}'
mutant args-expand-the-write-key pkg/runnerjob/job.go \
	'args[i] = strings.ReplaceAll(a, "$", "$$")' 'args[i] = strings.ReplaceAll(a, "$", "$")'
mutant empty-write-key-writes pkg/runnerapi/access.go \
	'return id.Keyless || run.WriteKeyMatches' 'return id.WriteKey == "" || run.WriteKeyMatches'
mutant swapped-plan-applies pkg/runner/runner.go \
	'} else if sum != r.planSum {' '} else if sum != sum {'
mutant lingering-programs-kept pkg/runner/terraform.go \
	'_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)' ''
mutant cached-job-drops-operation pkg/manager/manager.go \
	'names.LabelOperation: string(j.Operation)}}}' '}}}'
mutant cached-job-drops-write-key pkg/manager/manager.go \
	'if j.Keyed {' 'if false {'

# Issue 51, item 6: guards that had no mutant.
# An approval of one plan frees another.
mutant gate-approves-any-destructive-plan pkg/approval/approval.go \
	'if g.ApprovedDestructivePlan == plan.Hash {' 'if g.ApprovedDestructivePlan != "" {'
mutant gate-approves-any-plan pkg/approval/approval.go \
	'if g.ApprovedPlan == plan.Hash || g.ApprovedDestructivePlan == plan.Hash {' 'if g.ApprovedPlan != "" || g.ApprovedDestructivePlan == plan.Hash {'
# Anyone sets a provider ID, changes one once set, or moves an object that
# holds them to another Cluster.
mutant provider-id-by-anyone pkg/webhook/admission.go \
	'if h.ManagerUser != "" && user == h.ManagerUser {' 'if user != "" {'
mutant provider-id-mutable pkg/providerid/providerid.go \
	'if old != nil && old.Spec.ProviderID != "" && obj.Spec.ProviderID != old.Spec.ProviderID {' 'if false {'
mutant relabel-allowed pkg/providerid/providerid.go \
	'return len(held) > 0 && was != "" && obj.GetLabels()[capi.ClusterNameLabel] != was' 'return len(held) > 0 && was != "" && false'
mutant relabel-by-anyone pkg/webhook/admission.go \
	'providerid.Relabels(old, obj) && (h.ManagerUser == "" || req.UserInfo.Username != h.ManagerUser) {' 'providerid.Relabels(old, obj) && false {'
# A write that sets provider IDs is not the manager's to make alone; an
# output that is no provider ID is written; one instance held twice.
mutant provider-ids-set-unseen pkg/providerid/providerid.go \
	'return !slices.Equal(was, ids)' 'return !slices.Equal(was, ids) && len(was) == 0'
mutant provider-id-any-form pkg/providerid/providerid.go \
	'if scheme, rest, ok := strings.Cut(id, "://"); !ok || scheme == "" || rest == "" {' 'if scheme, rest, ok := strings.Cut(id, "://"); !ok && scheme == "" && rest == "" {'
mutant provider-id-held-twice pkg/providerid/providerid.go \
	'if o.GetUID() != obj.GetUID() {' 'if o.GetUID() != obj.GetUID() && false {'
# The Job handler never tells the expectations a Job was seen: the next Job
# of the object waits out the expectations' timeout.
mutant job-never-observed pkg/controller/workspace/handlers.go \
	'		if added {
			expectations.JobObserved(key, job.Name)
		}' '		_ = added'
# The version a sync wrote is not remembered: a sync on the cache before it
# writes again what is written.
mutant written-version-not-recorded pkg/controller/workspace/patch.go \
	'	obj.SetGeneration(updated.GetGeneration())
	c.written.Wrote(cache.MetaObjectToName(obj), updated.GetResourceVersion())' '	obj.SetGeneration(updated.GetGeneration())
	_ = cache.MetaObjectToName(obj)'
mutant written-status-not-recorded pkg/controller/workspace/controller.go \
	'		return err
	}
	c.written.Wrote(cache.MetaObjectToName(obj), updated.GetResourceVersion())
	return nil
}
' '		return err
	}
	_ = updated
	return nil
}
'
# A run claims a state another object, or an abandoned one, left.
mutant state-of-another-object-claimed pkg/statestore/claim.go \
	'if name != s.Object.Name || head.Labels[names.LabelKind] != s.Object.Kind {' 'if false {'
mutant abandoned-state-claimed pkg/statestore/claim.go \
	'	if head.Labels[names.LabelAbandoned] == "true" {
		// A former' '	if false {
		// A former'
# A Job created before clusterctl's block-move annotation is written: a
# move may copy a state the Job is changing.
mutant job-before-block-move pkg/controller/workspace/start.go \
	'	if err := e.blockMove(ctx, r); err != nil {
		return err
	}' ''

# A condition quotes a module's output whole: past 32 KiB every status
# write of the object fails.
mutant condition-message-unbounded pkg/controller/workspace/status.go \
	'if len(msg) <= maxConditionMessage {' 'if true {'

# The pure decisions (decide.go): a paused object being deleted (clusterctl
# move pauses, then deletes) destroys nothing; no Job starts on a rescued
# state, on a missing one, on another object's or on an abandoned one.
mutant paused-deletion-destroys pkg/controller/workspace/decide.go \
	'	case f.Paused:
		d.Paused = true' '	case f.Paused && !f.Deleting:
		d.Paused = true'
mutant rescued-state-runs pkg/controller/workspace/decide.go \
	'if c := f.Rescued; c != nil {' 'if c := f.Rescued; c != nil && false {'
mutant missing-state-runs pkg/controller/workspace/decide.go \
	'if f.Applied && (f.Head == nil || !f.Head.HasState) {' 'if false {'
mutant others-state-taken pkg/controller/workspace/decide.go \
	'if head.NamesObject && (head.ObjectName != f.Name || head.Kind != f.Label) {' 'if false {'
mutant held-job-still-reads pkg/controller/workspace/gather.go \
	'if decideStart(f).Stop != startGo { // decided by what the object says' 'if false {'
mutant abandoned-state-taken pkg/controller/workspace/decide.go \
	'		if head.Abandoned {' '		if false {'

mutant catalog-job-reads-anything pkg/runnerapi/access.go \
	'	if !id.Catalog {' '	if true {'
mutant catalog-job-writes-state pkg/runnerapi/access.go \
	'if id.Catalog && sec.Name != id.Object.Result(id.Job) {' 'if false {'
mutant credentials-without-write-key pkg/runnerapi/server.go \
	'case id.Keyless || !id.writes(r):' 'case id.Keyless:'
mutant credentials-of-any-entry pkg/runnerapi/server.go \
	'if err := s.CatalogCredentials(ctx, id, name); err != nil {' 'if err := s.CatalogCredentials(ctx, id, name); false && err != nil {'
mutant catalog-values-unchecked pkg/catalog/check.go \
	'if why := CheckValue(d, v.Value.Raw); why != "" {' 'if why := CheckValue(d, v.Value.Raw); false && why != "" {'
mutant catalog-required-not-required pkg/catalog/check.go \
	'if d.Required && !given[d.Name]' 'if false && d.Required && !given[d.Name]'
mutant catalog-namespace-unchecked pkg/webhook/catalog.go \
	'		if !allowed {' '		if !allowed && false {'
mutant catalog-unresolved-admitted pkg/webhook/catalog.go \
	'if i < 0 || entry.Status.Versions[i].Digest == "" {' 'if i < 0 {'

mutant resolved-version-resolved-again pkg/controller/terraformmodule/sync.go \
	'if ok && st.Digest != "" && st.Ref == ref && (v.Digest == "" || v.Digest == st.Digest) {' 'if false {'
mutant catalog-pin-ignored pkg/controller/terraformmodule/sync.go \
	'&& pin != "" && res.Module.Digest != pin:' '&& false:'
mutant credentials-over-plain-http pkg/runner/credentials.go \
	'		if !loopback(u.Host) {' '		if false {'
mutant resolve-backoff-skipped pkg/controller/terraformmodule/sync.go \
	'if wait := retry.Sub(c.clock.Now()); wait > 0 {' 'if wait := retry.Sub(c.clock.Now()); false && wait > 0 {'
mutant resolve-jobs-kept pkg/controller/terraformmodule/sync.go \
	'		if wanted[job.InputsHash] {' '		if true {'
mutant ssh-without-known-hosts pkg/runner/credentials.go \
	'if len(bytes.TrimSpace(kh)) == 0 {' 'if len(bytes.TrimSpace(kh)) < 0 {'
mutant ssh-host-key-unchecked pkg/runner/credentials.go \
	'" -o StrictHostKeyChecking=yes -o UserKnownHostsFile="' '" -o StrictHostKeyChecking=no -o UserKnownHostsFile="'
mutant ssh-key-kept pkg/runner/credentials.go \
	'strings.HasPrefix(name, "GIT_SSH") ||' 'false ||'
mutant every-shard-resolves pkg/controller/terraformmodule/controller.go \
	'return c.WatchFilter == "" || m.Labels[capi.WatchFilterLabel] == c.WatchFilter' 'return true || m.Labels[capi.WatchFilterLabel] == c.WatchFilter'
mutant catalog-hidden-from-shards pkg/manager/informers.go \
	'NewFilteredTerraformModuleInformer(c, resync, noIndexes(), nil)' 'NewFilteredTerraformModuleInformer(c, resync, noIndexes(), captfTweak)'
mutant catalog-entry-let-go-in-use pkg/controller/terraformmodule/sync.go \
	'	if len(users) == 0 { // nothing names it: let go' '	if true {'
mutant catalog-deleting-entry-admitted pkg/webhook/catalog.go \
	'		if entry.DeletionTimestamp != nil {' '		if false {'
mutant catalog-description-raw pkg/catalog/inspect.go \
	'		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):' '		case false:'
mutant oci-layer-unchecked pkg/runner/oci.go \
	'if got := "sha256:" + hex.EncodeToString(sum[:]); got != layer.Digest || int64(len(body)) != layer.Size {' 'if got := "sha256:" + hex.EncodeToString(sum[:]); false && got != layer.Digest {'
mutant oci-path-escapes pkg/runner/oci.go \
	'if path.IsAbs(f.Name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(f.Name, `\`) {' 'if false {'
mutant oci-link-unpacked pkg/runner/oci.go \
	'		case !mode.IsRegular():' '		case false:'
mutant oci-any-artifact pkg/runner/oci.go \
	'if m.ArtifactType != ociModuleArtifactType && m.Config.MediaType != ociModuleArtifactType {' 'if false {'
mutant oci-manifest-unchecked pkg/runner/oci.go \
	'if ociDigest.MatchString(ref) && ref != digest {' 'if false {'
mutant provider-id-control-characters pkg/providerid/providerid.go \
	'if strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) >= 0 {' 'if strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) < -1 {'
mutant provider-id-not-ratcheted pkg/providerid/providerid.go \
	'	if slices.Contains(held, id) {' '	if false {'
mutant catalog-entry-let-go-at-once pkg/controller/terraformmodule/sync.go \
	'if wait := m.DeletionTimestamp.Add(deleteGrace).Sub(c.clock.Now()); wait > 0 {' 'if wait := m.DeletionTimestamp.Add(deleteGrace).Sub(c.clock.Now()); false && wait > 0 {'
mutant oci-runner-files-unpacked pkg/runner/oci.go \
	'if name == ".terraform" || strings.HasPrefix(name, ".terraform/") || isRunnerFile(name) {' 'if false {'
mutant oci-ref-any-path pkg/runner/oci.go \
	'if !ociTag.MatchString(ref) && !ociDigest.MatchString(ref) {' 'if false {'
mutant oci-realm-in-clear pkg/runner/oci.go \
	'&& loopback(realm.Host) && loopback(host))) {' '&& loopback(realm.Host))) {'
mutant credentials-through-tenant-proxy pkg/runner/credentials.go \
	'	r.env, r.heldEnv = holdInterception(r.env)' '	r.heldEnv = nil'
mutant catalog-live-users-unpaged pkg/controller/terraformmodule/sync.go \
	'if next, err = list(metav1.ListOptions{Limit: liveUsersPage, Continue: next}); err != nil {' 'if next, err = list(metav1.ListOptions{Continue: next}); err != nil {'
mutant plan-policy-deny-ignored pkg/runner/runner.go \
	'if res.Plan.Verdict = r.judge(ctx, res.Plan); res.Plan.Denied() {' 'if res.Plan.Verdict = r.judge(ctx, res.Plan); false {'
mutant plan-policy-deny-approvable pkg/approval/approval.go \
	'			return NotApprovable' '			return ""'
mutant plan-policy-require-approval-ignored pkg/approval/approval.go \
	'			g.Policy = infrav1.ApprovalPolicyManual' '			g.Policy = g.Policy'
mutant plan-policy-machine-waits-forever pkg/runner/runner.go \
	'if v.Action == infrav1.PlanActionRequireApproval && r.Config.Gate == "" {' 'if false {'
mutant plan-policy-denied-replans pkg/controller/workspace/decide.go \
	'		return resultPlanDenied' '		return resultPlanApproved'
mutant plan-policy-change-unseen pkg/controller/workspace/decide.go \
	'		if res.Plan.Verdict.Rules != rules {' '		if false {'
mutant plan-policy-allow-plan-only pkg/runnerjob/account.go \
	'(policy == nil || !planpolicy.MayAllow(policy.Rules))' 'true'
mutant plan-policy-error-opens pkg/planpolicy/planpolicy.go \
	'			matched = r.Action != infrav1.PlanActionAllow' '			matched = false'
mutant plan-policy-weakest-wins pkg/planpolicy/planpolicy.go \
	'if matched && rank[r.Action] > rank[v.Action] {' 'if matched {'
mutant plan-policy-namespace-unselected pkg/planpolicy/planpolicy.go \
	'			if !s.Matches(labels.Set(l)) {' '			if !s.Matches(labels.Set(l)) && false {'

if $check; then
	echo "$total mutants, $((total - caught)) stale"
else
	echo "$total mutants, $caught caught"
fi
if ((${#missed[@]})); then
	printf 'not caught: %s\n' "${missed[@]}"
	exit 1
fi
