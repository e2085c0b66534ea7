package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// quickRun is a loop that completes at once.
var quickRun = v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
	"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}

// scheduleAt is a LoopSchedule reconciler of the test's own, its clock at
// t: each call of reconcile is one reconcile against the API server, as a
// (new) operator takes it at that moment.
type scheduleAt struct {
	r     *LoopScheduleReconciler
	clock *clocktesting.FakeClock
	key   client.ObjectKey
}

func newScheduleAt(key client.ObjectKey, t time.Time) *scheduleAt {
	clk := clocktesting.NewFakeClock(t)
	return &scheduleAt{key: key, clock: clk, r: &LoopScheduleReconciler{Client: k8sClient, APIReader: k8sClient, Scheme: scheme, Clock: clk,
		Recorder: events.NewFakeRecorder(100)}}
}

// at reconciles the schedule at t.
func (s *scheduleAt) at(t time.Time) reconcile.Result {
	s.clock.SetTime(t)
	res, err := s.r.Reconcile(bg, reconcile.Request{NamespacedName: s.key})
	Expect(err).NotTo(HaveOccurred())
	return res
}

// recorded is what the reconciler's events said.
func (s *scheduleAt) recorded() []string {
	var out []string
	for {
		select {
		case e := <-s.r.Recorder.(*events.FakeRecorder).Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func createSchedule(ns, name string, spec v1alpha1.LoopScheduleSpec) *v1alpha1.LoopSchedule {
	sch := &v1alpha1.LoopSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8sClient.Create(bg, sch)).To(Succeed())
	return sch
}

func getSchedule(key client.ObjectKey) *v1alpha1.LoopSchedule {
	sch := &v1alpha1.LoopSchedule{}
	Expect(k8sClient.Get(bg, key, sch)).To(Succeed())
	return sch
}

// runsOf lists a schedule's run names.
func runsOf(ns string) []string {
	list := &v1alpha1.LoopList{}
	Expect(k8sClient.List(bg, list, client.InNamespace(ns), client.HasLabels{LabelSchedule})).To(Succeed())
	var names []string
	for _, l := range list.Items {
		if l.DeletionTimestamp.IsZero() {
			names = append(names, l.Name)
		}
	}
	return names
}

// firstDue is the first time after the schedule's creation a schedule of
// every five minutes is due.
func firstDue(sch *v1alpha1.LoopSchedule) time.Time {
	return sch.CreationTimestamp.Truncate(5 * time.Minute).Add(5 * time.Minute)
}

var _ = Describe("LoopSchedule", func() {
	var op *operator
	BeforeEach(func() {
		op = startOperator(Config{}) // runs the scheduled Loops
		DeferCleanup(func() { op.stop() })
	})

	It("starts a run when it is due, once, names it from the minute, and reports it when it ends", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "nightly", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *",
			Loop: &v1alpha1.LoopRunTemplate{Metadata: v1alpha1.RunMetadata{Labels: map[string]string{"team": "a",
				v1alpha1.LabelParent: "someone", v1alpha1.LabelTemplate: "t"}}, Spec: quickRun}})
		key := client.ObjectKeyFromObject(sch)
		due := firstDue(sch)
		s := newScheduleAt(key, due)

		res := s.at(due.Add(-2 * time.Second))
		Expect(runsOf(ns)).To(BeEmpty())
		Expect(res.RequeueAfter).To(BeNumerically("~", 2*time.Second, 200*time.Millisecond))
		got := getSchedule(key)
		Expect(got.Status.NextScheduleTime.Time).To(BeTemporally("==", due))
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition)
		Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		Expect(ready.Reason).To(Equal(ReasonScheduled))

		res = s.at(due.Add(time.Second))
		name := fmt.Sprintf("nightly-%d", due.Unix()/60)
		Expect(runsOf(ns)).To(ConsistOf(name))
		Expect(res.RequeueAfter).To(BeNumerically("~", 5*time.Minute-time.Second, 200*time.Millisecond))
		Expect(s.recorded()).To(ContainElement(ContainSubstring("RunStarted started " + name)))
		run := &v1alpha1.Loop{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, run)).To(Succeed())
		Expect(metav1.IsControlledBy(run, getSchedule(key))).To(BeTrue())
		Expect(run.Labels).To(HaveKeyWithValue("team", "a"))
		// A run is nobody's child: the child labels are not copied.
		Expect(run.Labels).NotTo(HaveKey(v1alpha1.LabelParent))
		Expect(run.Labels).NotTo(HaveKey(v1alpha1.LabelTemplate))
		Expect(run.Annotations).To(HaveKeyWithValue(AnnotationScheduledTime, due.UTC().Format(time.RFC3339)))
		got = getSchedule(key)
		Expect(got.Status.LastScheduleTime.Time).To(BeTemporally("==", due))
		Expect(got.Status.Active).To(HaveLen(1))

		// Reconciled again in the same window: no second run.
		s.at(due.Add(30 * time.Second))
		Expect(runsOf(ns)).To(ConsistOf(name))

		// The run ends: the schedule says how.
		Expect(waitFinished(client.ObjectKeyFromObject(run)).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		s.at(due.Add(time.Minute))
		got = getSchedule(key)
		Expect(got.Status.Active).To(BeEmpty())
		Expect(got.Status.LastRun.Name).To(Equal(name))
		Expect(got.Status.LastRun.Phase).To(Equal(v1alpha1.PhaseCompleted))
		Expect(got.Status.LastSuccessfulTime).NotTo(BeNil())
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	})

	It("reads the schedule in its time zone", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "tokyo", v1alpha1.LoopScheduleSpec{Schedule: "0 9 * * *", TimeZone: ptr.To("Asia/Tokyo"),
			Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		s := newScheduleAt(client.ObjectKeyFromObject(sch), sch.CreationTimestamp.Time)
		s.at(sch.CreationTimestamp.Time)
		next := getSchedule(s.key).Status.NextScheduleTime.UTC()
		Expect(next.Hour()).To(Equal(0)) // 09:00 in Tokyo is midnight UTC
		Expect(next.Minute()).To(Equal(0))
	})

	It("is started once across an operator restart, even when the status write of the firing was lost", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "once", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		key := client.ObjectKeyFromObject(sch)
		due := firstDue(sch)
		newScheduleAt(key, due).at(due.Add(time.Second))
		Expect(runsOf(ns)).To(HaveLen(1))

		// The status patch never reached the API server.
		got := getSchedule(key)
		patch := client.MergeFrom(got.DeepCopy())
		got.Status.LastScheduleTime, got.Status.Active = nil, nil
		Expect(k8sClient.Status().Patch(bg, got, patch)).To(Succeed())

		// A new operator: the same run, not another.
		again := newScheduleAt(key, due.Add(2*time.Second))
		again.at(due.Add(2 * time.Second))
		Expect(runsOf(ns)).To(HaveLen(1))
		got = getSchedule(key)
		Expect(got.Status.LastScheduleTime.Time).To(BeTemporally("==", due))
		// The run is known again: still active, or (the operator ran it
		// meanwhile) the last run.
		var known []string
		for _, a := range got.Status.Active {
			known = append(known, a.Name)
		}
		if got.Status.LastRun != nil {
			known = append(known, got.Status.LastRun.Name)
		}
		Expect(known).To(ConsistOf(runsOf(ns)))
		Expect(again.recorded()).NotTo(ContainElement(ContainSubstring("RunStarted")))
	})

	It("starts only the latest of the runs missed while the operator was away, and none past startingDeadlineSeconds", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "missed", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		due := firstDue(sch)
		latest := due.Add(55 * time.Minute) // twelve were due
		newScheduleAt(client.ObjectKeyFromObject(sch), latest).at(latest.Add(time.Minute))
		Expect(runsOf(ns)).To(ConsistOf(fmt.Sprintf("missed-%d", latest.Unix()/60)))

		late := createSchedule(ns, "late", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", StartingDeadlineSeconds: ptr.To[int64](30),
			Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		s := newScheduleAt(client.ObjectKeyFromObject(late), latest)
		s.at(firstDue(late).Add(time.Minute)) // a minute late: past its 30 s
		Expect(runsOf(ns)).To(HaveLen(1))
		Expect(s.recorded()).To(ContainElement(ContainSubstring("MissedSchedule")))
		s.at(firstDue(late).Add(5*time.Minute + 10*time.Second)) // the next, in time
		Expect(runsOf(ns)).To(ContainElement(fmt.Sprintf("late-%d", firstDue(late).Add(5*time.Minute).Unix()/60)))
	})

	Context("while a run still runs", func() {
		// A suspended run stays active until it is resumed.
		held := quickRun
		held.Suspend = true
		start := func(ns string, policy v1alpha1.ConcurrencyPolicy, deadline *int64) (*scheduleAt, time.Time, string) {
			sch := createSchedule(ns, "held", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", ConcurrencyPolicy: policy,
				StartingDeadlineSeconds: deadline, Loop: &v1alpha1.LoopRunTemplate{Spec: held}})
			due := firstDue(sch)
			s := newScheduleAt(client.ObjectKeyFromObject(sch), due)
			s.at(due.Add(time.Second))
			first := fmt.Sprintf("held-%d", due.Unix()/60)
			Eventually(func(g Gomega) {
				g.Expect(getLoop(g, client.ObjectKey{Namespace: ns, Name: first}).Status.Phase).To(Equal(v1alpha1.PhaseSuspended))
			}).Should(Succeed())
			return s, due.Add(5 * time.Minute), first
		}
		resume := func(ns, name string) {
			l := &v1alpha1.Loop{}
			Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, l)).To(Succeed())
			patch := client.MergeFrom(l.DeepCopy())
			l.Spec.Suspend = false
			Expect(k8sClient.Patch(bg, l, patch)).To(Succeed())
			waitFinished(client.ObjectKeyFromObject(l))
		}

		It("Allow starts the next run beside it", func() {
			ns := newNamespace()
			s, next, first := start(ns, v1alpha1.AllowConcurrent, nil)
			s.at(next.Add(time.Second))
			Expect(runsOf(ns)).To(ConsistOf(first, fmt.Sprintf("held-%d", next.Unix()/60)))
			Expect(getSchedule(s.key).Status.Active).To(HaveLen(2))
		})

		It("Forbid skips it, and starts it late when the running one ends", func() {
			ns := newNamespace()
			s, next, first := start(ns, v1alpha1.ForbidConcurrent, nil)
			s.at(next.Add(time.Second))
			Expect(runsOf(ns)).To(ConsistOf(first))
			Expect(s.recorded()).To(ContainElement(ContainSubstring("RunSkipped")))
			resume(ns, first)
			s.at(next.Add(time.Minute))
			Expect(runsOf(ns)).To(ConsistOf(first, fmt.Sprintf("held-%d", next.Unix()/60)))
		})

		It("Forbid with a deadline drops the run the running one held back past it", func() {
			ns := newNamespace()
			s, next, first := start(ns, v1alpha1.ForbidConcurrent, ptr.To[int64](20))
			s.at(next.Add(time.Second))
			resume(ns, first)
			s.at(next.Add(time.Minute))
			Expect(runsOf(ns)).To(ConsistOf(first))
		})

		It("Replace never deletes the run it just made when its own status write is not in the cache yet", func() {
			ns := newNamespace()
			s, _, first := start(ns, v1alpha1.ReplaceConcurrent, nil)
			Expect(getSchedule(s.key).Status.LastScheduleTime).NotTo(BeNil())
			// The cache lags: the schedule as it was before that write.
			s.r.Client = staleSchedules{Client: k8sClient}
			due := firstDue(getSchedule(s.key))
			s.at(due.Add(2 * time.Second))
			s.at(due.Add(3 * time.Second))
			Expect(runsOf(ns)).To(ConsistOf(first))
			l := getLoop(Default, client.ObjectKey{Namespace: ns, Name: first})
			Expect(l.DeletionTimestamp.IsZero()).To(BeTrue())
			Expect(s.recorded()).NotTo(ContainElement(ContainSubstring("RunReplaced")))
		})

		It("Replace deletes the running one and starts the next", func() {
			ns := newNamespace()
			s, next, first := start(ns, v1alpha1.ReplaceConcurrent, nil)
			s.at(next.Add(time.Second))
			Eventually(func() []string { return runsOf(ns) }).Should(ConsistOf(fmt.Sprintf("held-%d", next.Unix()/60)))
			Expect(s.recorded()).To(ContainElement(ContainSubstring("RunReplaced deleted " + first)))
		})
	})

	It("keeps the newest runs within the history limits and deletes the older ones", func() {
		ns := newNamespace()
		gate := GinkgoT().TempDir()
		spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a":      {Action: fmt.Sprintf("[ ! -f %s/fail ]", gate), OnSuccess: "done", OnFailure: "broken"},
			"done":   {Terminal: true},
			"broken": {Terminal: true, Failure: ptr.To(true)},
		}}
		sch := createSchedule(ns, "kept", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", SuccessfulRunsHistoryLimit: ptr.To[int32](2),
			FailedRunsHistoryLimit: ptr.To[int32](1), Loop: &v1alpha1.LoopRunTemplate{Spec: spec}})
		due := firstDue(sch)
		s := newScheduleAt(client.ObjectKeyFromObject(sch), due)
		name := func(i int) string { return fmt.Sprintf("kept-%d", due.Add(time.Duration(i)*5*time.Minute).Unix()/60) }
		for i := range 6 {
			if i == 4 {
				Expect(os.WriteFile(filepath.Join(gate, "fail"), nil, 0o644)).To(Succeed())
			}
			s.at(due.Add(time.Duration(i)*5*time.Minute + time.Second))
			waitFinished(client.ObjectKey{Namespace: ns, Name: name(i)})
		}
		s.at(due.Add(26 * time.Minute))
		Eventually(func() []string { return runsOf(ns) }).Should(ConsistOf(name(2), name(3), name(5)))
		Expect(getSchedule(s.key).Status.LastRun.Phase).To(Equal(v1alpha1.PhaseFailed))
	})

	It("says when the API server refuses its run or its template's name can be none, instead of retrying for ever", func() {
		ns := newNamespace()
		// A label the API server refuses on the run.
		sch := createSchedule(ns, "refused", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *",
			Loop: &v1alpha1.LoopRunTemplate{Metadata: v1alpha1.RunMetadata{Labels: map[string]string{"team": "not a label value!"}}, Spec: quickRun}})
		due := firstDue(sch)
		s := newScheduleAt(client.ObjectKeyFromObject(sch), due)
		Expect(s.at(due.Add(time.Second)).RequeueAfter).To(BeNumerically(">", time.Minute))
		got := getSchedule(s.key)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(ReasonRunRefused))
		Expect(ready.Message).To(ContainSubstring("not a label value!"))
		Expect(got.Status.LastScheduleTime.Time).To(BeTemporally("==", due))
		Expect(s.recorded()).To(ContainElement(ContainSubstring("RunRefused")))
		Expect(runsOf(ns)).To(BeEmpty())

		// A template name no object can have.
		bad := createSchedule(ns, "badname", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", Template: &v1alpha1.LoopTemplateRef{Name: "Not_A_Name"}})
		s = newScheduleAt(client.ObjectKeyFromObject(bad), firstDue(bad))
		s.at(firstDue(bad).Add(time.Second))
		ready = meta.FindStatusCondition(getSchedule(s.key).Status.Conditions, v1alpha1.ReadyCondition)
		Expect(ready.Reason).To(Equal(ReasonInvalidLoop))
		Expect(ready.Message).To(ContainSubstring(`"Not_A_Name" is not a LoopTemplate's name`))
	})

	It("runs a LoopTemplate with its parameters bound, and says when the template is missing", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "tpl", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *",
			Template: &v1alpha1.LoopTemplateRef{Name: "greet", With: map[string]apiextensionsv1.JSON{"who": {Raw: []byte(`"world"`)}}}})
		due := firstDue(sch)
		s := newScheduleAt(client.ObjectKeyFromObject(sch), due)
		s.at(due.Add(time.Second))
		Expect(runsOf(ns)).To(BeEmpty())
		ready := meta.FindStatusCondition(getSchedule(s.key).Status.Conditions, v1alpha1.ReadyCondition)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(ReasonTemplateNotFound))
		Expect(s.recorded()).To(ContainElement(ContainSubstring(`RunNotStarted the run of`)))

		createTemplate(ns, "greet", v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
			"a": {Action: "test ${context.who} = world", OnSuccess: "done", OnFailure: "wrong"}, "done": {Terminal: true},
			"wrong": {Terminal: true, Failure: ptr.To(true)}}},
			map[string]v1alpha1.Parameter{"who": {Required: true}})
		s.at(due.Add(2 * time.Second))
		Expect(runsOf(ns)).To(HaveLen(1))
		run := waitFinished(client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("tpl-%d", due.Unix()/60)})
		Expect(run.Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
		ready = meta.FindStatusCondition(getSchedule(s.key).Status.Conditions, v1alpha1.ReadyCondition)
		Expect(ready.Status).To(Equal(metav1.ConditionTrue))
	})

	It("says plainly when the schedule or its time zone cannot be read, and stalls until edited", func() {
		ns := newNamespace()
		for name, spec := range map[string]v1alpha1.LoopScheduleSpec{
			"bad-cron": {Schedule: "61 * * * *"},
			"bad-tz":   {Schedule: "@daily", TimeZone: ptr.To("Mars/Olympus")},
			"too-fast": {Schedule: "@every 10s"},
			"feb-30":   {Schedule: "0 0 30 2 *"},
		} {
			spec.Loop = &v1alpha1.LoopRunTemplate{Spec: quickRun}
			sch := createSchedule(ns, name, spec)
			s := newScheduleAt(client.ObjectKeyFromObject(sch), sch.CreationTimestamp.Add(time.Hour))
			Expect(s.at(sch.CreationTimestamp.Add(time.Hour)).RequeueAfter).To(BeZero())
			got := getSchedule(s.key)
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ReadyCondition)
			Expect(ready.Reason).To(Equal(ReasonInvalidSchedule), name)
			Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.StalledCondition)).To(BeTrue(), name)
		}
		Expect(runsOf(ns)).To(BeEmpty())
	})

	It("is healthy for kstatus once the operator keeps it, and failed while it cannot be read", func() {
		ns := newNamespace()
		good := createSchedule(ns, "good", v1alpha1.LoopScheduleSpec{Schedule: "@hourly", Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		bad := createSchedule(ns, "bad", v1alpha1.LoopScheduleSpec{Schedule: "every day", Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		for _, sch := range []*v1alpha1.LoopSchedule{good, bad} {
			st, err := fixture.KStatusOf(bg, k8sClient, "LoopSchedule", client.ObjectKeyFromObject(sch))
			Expect(err).NotTo(HaveOccurred())
			Expect(st).To(Equal(status.InProgressStatus), "%s before the operator saw it", sch.Name)
			newScheduleAt(client.ObjectKeyFromObject(sch), time.Now()).at(time.Now())
		}
		for sch, want := range map[*v1alpha1.LoopSchedule]status.Status{good: status.CurrentStatus, bad: status.FailedStatus} {
			st, err := fixture.KStatusOf(bg, k8sClient, "LoopSchedule", client.ObjectKeyFromObject(sch))
			Expect(err).NotTo(HaveOccurred())
			Expect(st).To(Equal(want), sch.Name)
		}
	})

	It("is refused by the API server without a loop, or with both a loop and a template", func() {
		ns := newNamespace()
		for _, spec := range []v1alpha1.LoopScheduleSpec{
			{Schedule: "@daily"},
			{Schedule: "@daily", Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}, Template: &v1alpha1.LoopTemplateRef{Name: "x"}},
		} {
			err := k8sClient.Create(bg, &v1alpha1.LoopSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: spec})
			Expect(err).To(MatchError(ContainSubstring("exactly one of loop")))
		}
	})
})

var _ = Describe("LoopSchedule in the operator", func() {
	It("is woken when a run ends: a Forbid schedule starts the run the running one held back", func() {
		clk := clocktesting.NewFakeClock(time.Now())
		op := runOperatorWith(Config{AllowLocalActions: true, LocalWorkdir: GinkgoT().TempDir()}, func(mgr ctrl.Manager) error {
			r := NewScheduleReconciler(mgr)
			r.Clock = clk
			return r.SetupWithManager(mgr)
		})
		DeferCleanup(op.stop)
		ns := newNamespace()
		held := quickRun
		held.Suspend = true
		sch := createSchedule(ns, "woken", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *", ConcurrencyPolicy: v1alpha1.ForbidConcurrent,
			Loop: &v1alpha1.LoopRunTemplate{Spec: held}})
		// The clock just past the first firing; an edit wakes the schedule.
		due := firstDue(sch)
		clk.SetTime(due.Add(time.Second))
		Expect(k8sClient.Patch(bg, sch, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"successfulRunsHistoryLimit":4}}`)))).To(Succeed())
		first := fmt.Sprintf("woken-%d", due.Unix()/60)
		Eventually(func() []string { return runsOf(ns) }).Should(ConsistOf(first))
		Eventually(func(g Gomega) {
			got := &v1alpha1.LoopSchedule{}
			g.Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(sch), got)).To(Succeed())
			g.Expect(got.Status.Active).To(HaveLen(1))
		}).Should(Succeed())

		// The next firing passes while the first is held: skipped. Its
		// end wakes the schedule, which starts the held-back run.
		clk.SetTime(due.Add(5*time.Minute + time.Second))
		Expect(k8sClient.Patch(bg, sch, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"failedRunsHistoryLimit":2}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "RunSkipped")).NotTo(BeEmpty())
		}).Should(Succeed())
		Expect(runsOf(ns)).To(ConsistOf(first))
		l := &v1alpha1.Loop{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: first}, l)).To(Succeed())
		Expect(k8sClient.Patch(bg, l, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))).To(Succeed())
		second := fmt.Sprintf("woken-%d", due.Add(5*time.Minute).Unix()/60)
		Eventually(func() []string { return runsOf(ns) }, "30s").Should(ConsistOf(first, second))
		Eventually(func(g Gomega) {
			ev := eventNotes(g, ns, "RunStarted")
			g.Expect(ev).To(ContainElement(ContainSubstring(second)))
		}).Should(Succeed())
	})
})

// staleSchedules reads LoopSchedules as a cache would that has not yet
// seen their status's lastScheduleTime.
type staleSchedules struct{ client.Client }

func (c staleSchedules) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if sch, ok := obj.(*v1alpha1.LoopSchedule); ok {
		sch.Status.LastScheduleTime = nil
		sch.Status.Active = nil
	}
	return nil
}
