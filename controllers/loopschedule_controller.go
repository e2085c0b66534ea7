package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Labels and annotations of a scheduled run's Loop.
const (
	// LabelSchedule names the LoopSchedule that started a Loop.
	LabelSchedule = "looprun.io/schedule"
	// AnnotationScheduledTime is the time a scheduled run was due (RFC 3339).
	AnnotationScheduledTime = "looprun.io/scheduled-time"
)

// refused says the API server refused a run for what it is: admission
// (a policy, a quota), its rules; not for a moment's trouble.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// Condition reasons of a LoopSchedule.
const (
	ReasonRunRefused        = "RunRefused"
	ReasonScheduled         = "Scheduled"
	ReasonScheduleSuspended = "Suspended"
	ReasonInvalidSchedule   = "InvalidSchedule"
	ReasonInvalidLoop       = "InvalidLoop"
	ReasonTemplateNotFound  = "LoopTemplateNotFound"
)

// LoopScheduleReconciler starts the runs of LoopSchedules, as the CronJob
// controller starts Jobs: a run is a Loop named from the schedule and the
// minute it was due, so that however often the schedule is reconciled (an
// operator restarted across a firing, a status write lost) a run is
// created once; of the runs missed while the operator was away only the
// latest is started, within startingDeadlineSeconds.
type LoopScheduleReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Workers bounds the schedules reconciled at once (0:
	// DefaultScheduleWorkers).
	Workers int
}

// RBAC, each verb for a reason:
// loopschedules: watch them; the one status patch per reconcile.
// +kubebuilder:rbac:groups=looprun.io,resources=loopschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=looprun.io,resources=loopschedules/status,verbs=get;patch
// loopschedules/finalizers: the owner reference of a run's Loop blocks
// the schedule's deletion (OwnerReferencesPermissionEnforcement).
// +kubebuilder:rbac:groups=looprun.io,resources=loopschedules/finalizers,verbs=update
// loops: create the runs; delete those past the history limits and those
// a Replace policy replaces.
// +kubebuilder:rbac:groups=looprun.io,resources=loops,verbs=create;delete
// looptemplates: the template a schedule names.
// +kubebuilder:rbac:groups=looprun.io,resources=looptemplates,verbs=get

// SetupWithManager registers the reconciler: it watches LoopSchedules and
// the Loops they own (a run that ends frees a Forbid schedule and counts
// in its history).
//
// Many schedules fire at the same minute: ScheduleWorkers start their
// runs at once, and namespaces take turns in the work queue (fairQueue),
// so that one tenant's hundreds of schedules cannot hold another's past its
// startingDeadlineSeconds.
func (r *LoopScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.LoopSchedule{}, ctrlbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&v1alpha1.Loop{}, ctrlbuilder.WithPredicates(runEnded)).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultScheduleWorkers), NewQueue: newFairQueue}).
		Named("loopschedule").
		Complete(r)
}

// DefaultScheduleWorkers is how many schedules are reconciled at once by
// default: a reconcile that starts a run makes a few API calls, and a
// minute boundary may find hundreds due.
const DefaultScheduleWorkers = 8

// runEnded passes the changes of a run that matter to its schedule: its
// creation, its end and its deletion.
var runEnded = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, oldOK := e.ObjectOld.(*v1alpha1.Loop)
		cur, curOK := e.ObjectNew.(*v1alpha1.Loop)
		return oldOK && curOK && old.Status.Phase.IsFinished() != cur.Status.Phase.IsFinished()
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// NewScheduleReconciler wires a LoopScheduleReconciler to a manager.
func NewScheduleReconciler(mgr ctrl.Manager) *LoopScheduleReconciler {
	return &LoopScheduleReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("looprun"), Clock: clock.RealClock{}}
}

// Reconcile brings the schedule's status up to date, prunes its history,
// and starts the run that is due, if any.
func (r *LoopScheduleReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	sch := &v1alpha1.LoopSchedule{}
	if err := r.Client.Get(ctx, req.NamespacedName, sch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !sch.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	before := sch.DeepCopy()
	res, err := r.reconcile(ctx, sch, r.Clock.Now())
	if err == nil {
		// The generation is observed once its work was done.
		sch.Status.ObservedGeneration = sch.Generation
	}
	if equality.Semantic.DeepEqual(before.Status, sch.Status) {
		return res, err
	}
	if perr := r.Client.Status().Patch(ctx, sch, client.MergeFrom(before)); client.IgnoreNotFound(perr) != nil {
		return reconcile.Result{}, errors.Join(err, perr)
	}
	return res, err
}

// reconcile observes the schedule's runs, prunes its history and starts
// the run that is due; what it learnt is in sch's status, even when a step
// failed.
func (r *LoopScheduleReconciler) reconcile(ctx context.Context, sch *v1alpha1.LoopSchedule, now time.Time) (reconcile.Result, error) {
	runs, err := r.runs(ctx, sch)
	if err != nil {
		return reconcile.Result{}, err
	}
	active := observeRuns(sch, runs, now)
	if err := r.pruneHistory(ctx, sch, runs); err != nil {
		return reconcile.Result{}, err
	}
	return r.schedule(ctx, sch, active, now)
}

// schedule starts the run that is due and says when the next one is.
func (r *LoopScheduleReconciler) schedule(ctx context.Context, sch *v1alpha1.LoopSchedule, active []*v1alpha1.Loop, now time.Time) (reconcile.Result, error) {
	sched, err := parseSchedule(sch.Spec.Schedule, sch.Spec.TimeZone)
	if err != nil {
		sch.Status.NextScheduleTime = nil
		r.setReady(sch, metav1.ConditionFalse, ReasonInvalidSchedule, err.Error())
		return reconcile.Result{}, nil
	}
	if ptr.Deref(sch.Spec.Suspend, false) {
		sch.Status.NextScheduleTime = nil
		r.setReady(sch, metav1.ConditionTrue, ReasonScheduleSuspended, "suspended: no new run starts")
		return reconcile.Result{}, nil
	}
	spec, md, reason, msg, err := r.runSpec(ctx, sch)
	if err != nil {
		return reconcile.Result{}, err
	}
	if reason != "" {
		// A template made later is found at the next firing; an invalid
		// inline spec waits for an edit.
		r.setReady(sch, metav1.ConditionFalse, reason, msg)
	} else {
		r.setReady(sch, metav1.ConditionTrue, ReasonScheduled, "")
	}
	next := sched.Next(now)
	if next.IsZero() {
		sch.Status.NextScheduleTime = nil
		r.setReady(sch, metav1.ConditionFalse, ReasonInvalidSchedule,
			fmt.Sprintf("schedule %q never fires: no date matches it within five years", sch.Spec.Schedule))
		return reconcile.Result{}, nil
	}
	sch.Status.NextScheduleTime = &metav1.Time{Time: next}
	requeue := reconcile.Result{RequeueAfter: next.Sub(now) + 100*time.Millisecond}

	due, missed := dueTime(sch, sched, now)
	if due.IsZero() {
		return requeue, nil
	}
	if d := sch.Spec.StartingDeadlineSeconds; d != nil && now.Sub(due) > time.Duration(*d)*time.Second {
		r.event(sch, nil, corev1.EventTypeWarning, v1alpha1.EventReasonMissedSchedule, "Schedule",
			"the run of %s did not start within startingDeadlineSeconds (%ds): it is skipped", due.UTC().Format(time.RFC3339), *d)
		return requeue, nil
	}
	if missed > 100 {
		r.event(sch, nil, corev1.EventTypeWarning, v1alpha1.EventReasonTooManyMissedTimes, "Schedule",
			"%d runs were missed; only the latest, of %s, starts (is startingDeadlineSeconds set?)", missed, due.UTC().Format(time.RFC3339))
	}
	if held, err := r.makeRoom(ctx, sch, active, due); err != nil {
		return reconcile.Result{}, err
	} else if held {
		return requeue, nil
	}
	if spec == nil {
		r.event(sch, nil, corev1.EventTypeWarning, v1alpha1.EventReasonRunNotStarted, "Create", "the run of %s cannot start: %s", due.UTC().Format(time.RFC3339), msg)
		return requeue, nil
	}
	run, err := r.newRun(sch, spec, md, due)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := createLoopObject(ctx, r.Client, run); err != nil {
		if refused(err) {
			// The API server (an admission policy, a quota, the CRD's
			// rules) will refuse it again: said, and tried at the next
			// firing, not in a loop of retries.
			msg := fmt.Sprintf("the run of %s was refused: %v", due.UTC().Format(time.RFC3339), err)
			r.setReady(sch, metav1.ConditionFalse, ReasonRunRefused, msg)
			r.event(sch, nil, corev1.EventTypeWarning, ReasonRunRefused, "Create", "%s", msg)
			sch.Status.LastScheduleTime = &metav1.Time{Time: due}
			return requeue, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, err
		}
		// Made before (a restart, a lost status write): started once.
		existing := &v1alpha1.Loop{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), existing); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if !metav1.IsControlledBy(existing, sch) {
			r.setReady(sch, metav1.ConditionFalse, "NameTaken", fmt.Sprintf("Loop %s, this run's name, is not this schedule's", run.Name))
			return requeue, nil
		}
		run = existing
	} else {
		log.FromContext(ctx).Info("started a scheduled run", "loop", run.Name, "due", due)
		r.event(sch, run, corev1.EventTypeNormal, v1alpha1.EventReasonRunStarted, "Create", "started %s, the run of %s", run.Name, due.UTC().Format(time.RFC3339))
	}
	sch.Status.LastScheduleTime = &metav1.Time{Time: due}
	if !slices.ContainsFunc(sch.Status.Active, func(a v1alpha1.ScheduledRun) bool { return a.Name == run.Name }) {
		sch.Status.Active = append(sch.Status.Active, v1alpha1.ScheduledRun{Name: run.Name, ScheduledTime: metav1.Time{Time: due}, Phase: run.Status.Phase})
	}
	return requeue, nil
}

// makeRoom applies the concurrency policy to the runs still going when
// the run of due is to start: held is true when it must not start yet.
func (r *LoopScheduleReconciler) makeRoom(ctx context.Context, sch *v1alpha1.LoopSchedule, active []*v1alpha1.Loop, due time.Time) (held bool, err error) {
	if len(active) == 0 {
		return false, nil
	}
	switch sch.Spec.ConcurrencyPolicy {
	case v1alpha1.ForbidConcurrent:
		// The run stays due: when the running one ends (its end wakes
		// the schedule) it starts late, within startingDeadlineSeconds.
		r.event(sch, active[0], corev1.EventTypeNormal, v1alpha1.EventReasonRunSkipped, "Schedule",
			"the run of %s does not start: %s still runs and concurrencyPolicy is Forbid", due.UTC().Format(time.RFC3339), active[0].Name)
		return true, nil
	case v1alpha1.ReplaceConcurrent:
		for _, l := range active {
			if err := r.Client.Delete(ctx, l, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return false, err
			}
			r.event(sch, l, corev1.EventTypeNormal, v1alpha1.EventReasonRunReplaced, "Delete", "deleted %s: the run of %s replaces it (concurrencyPolicy Replace)", l.Name, due.UTC().Format(time.RFC3339))
		}
		sch.Status.Active = nil
	}
	return false, nil
}

// dueTime is the latest time the schedule was due and no run started
// (zero when none), and how many such times there were: from the last
// run's time (or the schedule's creation) up to now.
func dueTime(sch *v1alpha1.LoopSchedule, sched cron.Schedule, now time.Time) (time.Time, int) {
	from := sch.CreationTimestamp.Time
	if sch.Status.LastScheduleTime != nil {
		from = sch.Status.LastScheduleTime.Time
	}
	// A minute schedule is due 527,040 times a year at most: look back no
	// more than a year.
	from = latest(from, now.AddDate(-1, 0, 0))
	var due time.Time
	missed := 0
	for t := sched.Next(from); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		due = t
		missed++
	}
	return due, missed
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// parseSchedule reads a cron schedule in its time zone. A run's name
// holds the minute it was due, so a schedule finer than a minute is
// refused.
func parseSchedule(text string, tz *string) (cron.Schedule, error) {
	if strings.HasPrefix(text, "TZ=") || strings.HasPrefix(text, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: name the time zone in timeZone, not in the schedule", text)
	}
	spec := text
	if zone := ptr.Deref(tz, ""); zone != "" {
		if _, err := time.LoadLocation(zone); err != nil {
			return nil, fmt.Errorf("timeZone %q: %w", zone, err)
		}
		spec = "CRON_TZ=" + zone + " " + text
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", text, err)
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok && every.Delay < time.Minute {
		return nil, fmt.Errorf("schedule %q: runs are at least a minute apart", text)
	}
	return sched, nil
}

// runSpec is the spec of the schedule's runs and their labels and
// annotations: a copy of the inline Loop's, or the LoopTemplate's with its
// parameters bound as a sub-loop state binds them, checked as a Loop is.
// Without a spec, reason and msg say why no run can be made.
func (r *LoopScheduleReconciler) runSpec(ctx context.Context, sch *v1alpha1.LoopSchedule) (
	spec *v1alpha1.LoopSpec, md v1alpha1.RunMetadata, reason, msg string, err error) {
	var what string
	switch t := sch.Spec.Template; {
	case t != nil:
		md, what = t.Metadata, "LoopTemplate "+t.Name
		tpl := &v1alpha1.LoopTemplate{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: sch.Namespace, Name: t.Name}, tpl); err != nil {
			switch {
			case len(validation.IsDNS1123Subdomain(t.Name)) > 0 || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
				// No such name can exist: said, not retried.
				return nil, md, ReasonInvalidLoop, fmt.Sprintf("spec.template.name %q is not a LoopTemplate's name", t.Name), nil
			case apierrors.IsNotFound(err):
				return nil, md, ReasonTemplateNotFound, fmt.Sprintf("no LoopTemplate %q in namespace %s", t.Name, sch.Namespace), nil
			}
			return nil, md, "", "", err
		}
		with, err := executor.DecodeContext(t.With)
		if err != nil {
			return nil, md, ReasonInvalidLoop, fmt.Sprintf("spec.template.with: %v", err), nil
		}
		s, failure := templateSpec(tpl, &executor.SubLoop{Loop: t.Name, With: with})
		if failure != nil {
			return nil, md, cmp.Or(failure.Reason, ReasonInvalidLoop), failure.Message, nil
		}
		spec = s
	case sch.Spec.Loop != nil:
		md, what = sch.Spec.Loop.Metadata, "spec.loop.spec"
		spec = sch.Spec.Loop.Spec.DeepCopy()
	default:
		return nil, md, ReasonInvalidLoop, "spec.loop or spec.template is required", nil
	}
	if errs := executor.Validate(spec); len(errs) > 0 {
		return nil, md, ReasonInvalidLoop, what + ": " + errs.ToAggregate().Error(), nil
	}
	return spec, md, "", "", nil
}

// newRun builds the Loop of the run due at due.
func (r *LoopScheduleReconciler) newRun(sch *v1alpha1.LoopSchedule, spec *v1alpha1.LoopSpec, md v1alpha1.RunMetadata, due time.Time) (*v1alpha1.Loop, error) {
	run := &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{
			Name: runName(sch.Name, due), Namespace: sch.Namespace,
			Labels: map[string]string{}, Annotations: map[string]string{},
		},
		Spec: *spec,
	}
	maps.Copy(run.Labels, md.Labels)
	maps.Copy(run.Annotations, md.Annotations)
	// A run is no sub-loop's child: the labels the operator gives a child
	// are not the author's to copy onto it.
	delete(run.Labels, v1alpha1.LabelParent)
	delete(run.Labels, v1alpha1.LabelTemplate)
	run.Labels[LabelSchedule] = v1alpha1.LabelValue(sch.Name)
	if shard := sch.Labels[v1alpha1.LabelShard]; shard != "" {
		run.Labels[v1alpha1.LabelShard] = shard
	} else {
		delete(run.Labels, v1alpha1.LabelShard) // the schedule's manager runs it
	}
	run.Annotations[AnnotationScheduledTime] = due.UTC().Format(time.RFC3339)
	if err := controllerutil.SetControllerReference(sch, run, r.Scheme); err != nil {
		return nil, err
	}
	return run, nil
}

// runName names the run due at t: the schedule's name and the minute,
// counted from the Unix epoch (as a CronJob names its Jobs).
func runName(schedule string, t time.Time) string {
	return fmt.Sprintf("%s-%d", schedule, t.Unix()/60)
}

// runs lists the schedule's runs, read through the API server: a run just
// made must be seen by the next reconcile, whatever the cache holds.
func (r *LoopScheduleReconciler) runs(ctx context.Context, sch *v1alpha1.LoopSchedule) ([]*v1alpha1.Loop, error) {
	list := &v1alpha1.LoopList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(sch.Namespace), client.MatchingLabels{LabelSchedule: v1alpha1.LabelValue(sch.Name)}); err != nil {
		return nil, err
	}
	var runs []*v1alpha1.Loop
	for i := range list.Items {
		if l := &list.Items[i]; metav1.IsControlledBy(l, sch) {
			runs = append(runs, l)
		}
	}
	slices.SortFunc(runs, func(a, b *v1alpha1.Loop) int { return scheduledTime(a).Compare(scheduledTime(b)) })
	return runs, nil
}

// scheduledTime is when a run was due.
func scheduledTime(l *v1alpha1.Loop) time.Time {
	if t, err := time.Parse(time.RFC3339, l.Annotations[AnnotationScheduledTime]); err == nil {
		return t
	}
	return l.CreationTimestamp.Time
}

// observeRuns writes the runs into the status and returns the active ones.
// status.lastScheduleTime is at least the newest run's time (the runs are
// read from the API server): the status read may come from a cache that
// has not caught up with this reconciler's last write, or that write was
// lost, and the run it made then must not be taken for one still to make
// (with Replace, deleted to make itself again).
func observeRuns(sch *v1alpha1.LoopSchedule, runs []*v1alpha1.Loop, now time.Time) []*v1alpha1.Loop {
	var active []*v1alpha1.Loop
	sch.Status.Active = nil
	for _, l := range runs {
		// A time to come is no run's (its annotation was edited): it would
		// silence the schedule until then.
		if t := scheduledTime(l); !t.After(now) && (sch.Status.LastScheduleTime == nil || t.After(sch.Status.LastScheduleTime.Time)) {
			sch.Status.LastScheduleTime = &metav1.Time{Time: t}
		}
		run := v1alpha1.ScheduledRun{Name: l.Name, ScheduledTime: metav1.Time{Time: scheduledTime(l)}, Phase: l.Status.Phase}
		if !l.Status.Phase.IsFinished() {
			if l.DeletionTimestamp.IsZero() {
				active = append(active, l)
				sch.Status.Active = append(sch.Status.Active, run)
			}
			continue
		}
		sch.Status.LastRun = &run
		if l.Status.Phase == v1alpha1.PhaseCompleted {
			end := cmp.Or(l.Status.UpdatedAt, &l.CreationTimestamp)
			if sch.Status.LastSuccessfulTime == nil || end.After(sch.Status.LastSuccessfulTime.Time) {
				sch.Status.LastSuccessfulTime = end.DeepCopy()
			}
		}
	}
	return active
}

// pruneHistory deletes the oldest finished runs past the history limits.
func (r *LoopScheduleReconciler) pruneHistory(ctx context.Context, sch *v1alpha1.LoopSchedule, runs []*v1alpha1.Loop) error {
	var ok, failed []*v1alpha1.Loop
	for _, l := range runs {
		switch {
		case !l.Status.Phase.IsFinished() || !l.DeletionTimestamp.IsZero():
		case l.Status.Phase == v1alpha1.PhaseCompleted:
			ok = append(ok, l)
		default:
			failed = append(failed, l)
		}
	}
	for _, h := range []struct {
		runs  []*v1alpha1.Loop
		limit *int32
		def   int
	}{{ok, sch.Spec.SuccessfulRunsHistoryLimit, 3}, {failed, sch.Spec.FailedRunsHistoryLimit, 1}} {
		keep := h.def
		if h.limit != nil {
			keep = int(*h.limit)
		}
		for _, l := range h.runs[:max(len(h.runs)-keep, 0)] { // oldest first
			if err := r.Client.Delete(ctx, l, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// setReady sets the schedule's health, as kstatus reads it: Ready, and
// Stalled while only an edit can help.
func (r *LoopScheduleReconciler) setReady(sch *v1alpha1.LoopSchedule, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&sch.Status.Conditions, metav1.Condition{Type: v1alpha1.ReadyCondition, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: sch.Generation})
	if status == metav1.ConditionFalse && (reason == ReasonInvalidSchedule || reason == ReasonInvalidLoop) {
		meta.SetStatusCondition(&sch.Status.Conditions, metav1.Condition{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: sch.Generation})
	} else {
		meta.RemoveStatusCondition(&sch.Status.Conditions, v1alpha1.StalledCondition)
	}
}

func (r *LoopScheduleReconciler) event(sch *v1alpha1.LoopSchedule, related runtime.Object, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(sch, related, typ, reason, action, "%s", eventNote(fmt.Sprintf(note, args...)))
	}
}
