package executor

import "github.com/looprun/looprun/api/v1alpha1"

// An Observer sees a run's events, batch by batch, with the run state they
// leave: what a driver shows or sends besides its own record (a progress
// display, spans, Kubernetes Events and logs, CloudEvents). The local
// driver shows each batch as it happens (before it is saved with the next
// save); the operator once the step's events are in the event log. An
// Observer may note what it needs in the run (a span's context) before the
// state is saved; it never changes how the run goes.
type Observer interface {
	Observe(run *v1alpha1.RunState, events []Event)
}

// ObserverFunc is a function as an Observer.
type ObserverFunc func(run *v1alpha1.RunState, events []Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(run *v1alpha1.RunState, events []Event) { f(run, events) }

// Observe shows events to each observer, in order; nothing when there are none.
func Observe(observers []Observer, run *v1alpha1.RunState, events []Event) {
	if len(events) == 0 {
		return
	}
	for _, o := range observers {
		o.Observe(run, events)
	}
}
