package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
)

var (
	errStatusPatch = errors.New("status patch refused")
	errDelete      = errors.New("delete refused")
)

// faultyWrites counts a client's status patches, and fails them and its
// deletes while told to.
type faultyWrites struct {
	client.Client
	patches                 atomic.Int32
	failPatch, failDeleting atomic.Bool
}

func (c *faultyWrites) Status() client.SubResourceWriter {
	return &faultyStatus{c.Client.Status(), c}
}

func (c *faultyWrites) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if c.failDeleting.Load() {
		return errDelete
	}
	return c.Client.Delete(ctx, obj, opts...)
}

type faultyStatus struct {
	client.SubResourceWriter
	c *faultyWrites
}

func (s *faultyStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.patches.Add(1)
	if s.c.failPatch.Load() {
		return errStatusPatch
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// A LoopSchedule's status is written as a Loop's is: one patch when it
// changed and none when it did not, observedGeneration only once the
// reconcile's work is done, and a failed patch's error returned beside the
// work's own. No operator runs here: this reconciler is the only writer,
// and the runs it starts stay active.
var _ = Describe("LoopSchedule status write", func() {
	It("patches only a change, observes a generation once its work is done, and returns a failed patch's error", func() {
		ns := newNamespace()
		sch := createSchedule(ns, "writes", v1alpha1.LoopScheduleSpec{Schedule: "*/5 * * * *",
			ConcurrencyPolicy: v1alpha1.ReplaceConcurrent, Loop: &v1alpha1.LoopRunTemplate{Spec: quickRun}})
		key := client.ObjectKeyFromObject(sch)
		s := newScheduleAt(key, time.Time{})
		faulty := &faultyWrites{Client: k8sClient}
		s.r.Client = faulty
		reconcileAt := func(t time.Time) error {
			s.clock.SetTime(t)
			_, err := s.r.Reconcile(bg, reconcile.Request{NamespacedName: key})
			return err
		}
		bumpGeneration := func(limit string) int64 {
			Expect(k8sClient.Patch(bg, getSchedule(key), client.RawPatch(types.MergePatchType,
				[]byte(`{"spec":{"successfulRunsHistoryLimit":`+limit+`}}`)))).To(Succeed())
			return getSchedule(key).Generation
		}
		due := firstDue(sch)

		By("a first reconcile writes the status and observes the generation")
		Expect(reconcileAt(due.Add(-time.Minute))).To(Succeed())
		Expect(faulty.patches.Load()).To(BeEquivalentTo(1))
		got := getSchedule(key)
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(got.Status.NextScheduleTime.Time).To(BeTemporally("==", due))

		By("a reconcile that changes nothing patches nothing")
		Expect(reconcileAt(due.Add(-30 * time.Second))).To(Succeed())
		Expect(faulty.patches.Load()).To(BeEquivalentTo(1))

		By("a refused patch is the reconcile's error, and nothing is observed")
		gen := bumpGeneration("4")
		faulty.failPatch.Store(true)
		Expect(reconcileAt(due.Add(-20 * time.Second))).To(MatchError(errStatusPatch))
		Expect(faulty.patches.Load()).To(BeEquivalentTo(2))
		Expect(getSchedule(key).Status.ObservedGeneration).To(Equal(gen - 1))
		faulty.failPatch.Store(false)

		By("the run that is due starts and the generation is observed")
		Expect(reconcileAt(due)).To(Succeed())
		got = getSchedule(key)
		Expect(got.Status.ObservedGeneration).To(Equal(gen))
		Expect(got.Status.Active).To(HaveLen(1))

		By("work that fails (Replace cannot delete the running one) writes what changed, but not observedGeneration")
		gen = bumpGeneration("5")
		faulty.failDeleting.Store(true)
		Expect(reconcileAt(due.Add(5 * time.Minute))).To(MatchError(errDelete))
		got = getSchedule(key)
		Expect(got.Status.NextScheduleTime.Time).To(BeTemporally("==", due.Add(10*time.Minute)))
		Expect(got.Status.ObservedGeneration).To(Equal(gen - 1))

		By("when the work and its status patch both fail, both errors are returned")
		faulty.failPatch.Store(true)
		err := reconcileAt(due.Add(10 * time.Minute))
		Expect(err).To(MatchError(errDelete))
		Expect(err).To(MatchError(errStatusPatch))

		By("once both succeed the generation is observed")
		faulty.failPatch.Store(false)
		faulty.failDeleting.Store(false)
		Expect(reconcileAt(due.Add(10 * time.Minute))).To(Succeed())
		got = getSchedule(key)
		Expect(got.Status.ObservedGeneration).To(Equal(gen))
		Expect(got.Status.Active).To(HaveLen(1))
		Expect(got.Status.Active[0].Name).To(Equal(runName(sch.Name, due.Add(10*time.Minute))))
	})
})
