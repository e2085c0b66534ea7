package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConcurrencyPolicy says what a LoopSchedule does when a run is due while
// an earlier one still runs, as a CronJob's does.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ConcurrencyPolicy string

const (
	// AllowConcurrent starts the new run beside the running ones.
	AllowConcurrent ConcurrencyPolicy = "Allow"
	// ForbidConcurrent skips the new run while one runs (it is started
	// late, within startingDeadlineSeconds, if the running one ends).
	ForbidConcurrent ConcurrencyPolicy = "Forbid"
	// ReplaceConcurrent stops and deletes the running ones, then starts
	// the new run.
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
)

// LoopScheduleSpec says when to run which loop.
// +kubebuilder:validation:XValidation:rule="has(self.loop) != has(self.template)",message="exactly one of loop (an inline Loop) and template (a LoopTemplate's name) is required"
type LoopScheduleSpec struct {
	// schedule is when to start a run, in cron's five fields (minute hour
	// day-of-month month day-of-week) or a macro (@hourly, @daily,
	// @weekly, @monthly, @yearly, @every DURATION).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`

	// timeZone is the IANA time zone the schedule is read in
	// ("Europe/Paris"); unset: UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone *string `json:"timeZone,omitempty"`

	// startingDeadlineSeconds is how late a run may still start after its
	// time (an operator that was down, a Forbid that held it back); a run
	// missed by more is skipped. Unset: no deadline.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// concurrencyPolicy is what to do when a run is due while another
	// still runs: Allow (default), Forbid or Replace.
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// suspend stops new runs; running ones go on.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// successfulRunsHistoryLimit is how many completed runs are kept
	// (older ones are deleted). Default 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	SuccessfulRunsHistoryLimit *int32 `json:"successfulRunsHistoryLimit,omitempty"`

	// failedRunsHistoryLimit is how many runs that ended otherwise
	// (failed, interrupted, at a limit) are kept. Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	FailedRunsHistoryLimit *int32 `json:"failedRunsHistoryLimit,omitempty"`

	// loop is the Loop each run creates, inline.
	// +optional
	Loop *LoopRunTemplate `json:"loop,omitempty"`

	// template names the LoopTemplate of the namespace each run runs, with
	// its parameters bound.
	// +optional
	Template *LoopTemplateRef `json:"template,omitempty"`
}

// LoopRunTemplate is the Loop a scheduled run creates.
type LoopRunTemplate struct {
	// metadata holds the labels and annotations of each run's Loop.
	// +optional
	Metadata RunMetadata `json:"metadata,omitempty"`

	// spec is the Loop's spec.
	// +required
	Spec LoopSpec `json:"spec"`
}

// RunMetadata is what a scheduled run's Loop carries besides its name.
type RunMetadata struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LoopTemplateRef names a LoopTemplate and binds its parameters.
type LoopTemplateRef struct {
	// metadata holds the labels and annotations of each run's Loop.
	// +optional
	Metadata RunMetadata `json:"metadata,omitempty"`

	// name of the LoopTemplate, in the schedule's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// with binds the template's parameters (as a sub-loop state's with).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	With map[string]apiextensionsv1.JSON `json:"with,omitempty"`
}

// ScheduledRun is a run a LoopSchedule started.
type ScheduledRun struct {
	// name of the run's Loop.
	Name string `json:"name"`
	// scheduledTime is the time the run was due.
	ScheduledTime metav1.Time `json:"scheduledTime"`
	// phase of the run's Loop when the schedule last looked.
	// +optional
	Phase Phase `json:"phase,omitempty"`
}

// LoopScheduleStatus is what the schedule did.
type LoopScheduleStatus struct {
	// active are the runs still running, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Active []ScheduledRun `json:"active,omitempty"`

	// lastScheduleTime is the time of the last run started (its due time).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// lastSuccessfulTime is when the last run that completed ended.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// lastRun is the last run that ended, with its phase.
	// +optional
	LastRun *ScheduledRun `json:"lastRun,omitempty"`

	// nextScheduleTime is when the next run is due (unset while suspended).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// observedGeneration is the spec generation the status reflects; 0
	// (the default, present from creation) until the operator first saw
	// the schedule, so that GitOps tools read a new one as in progress.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (True while the schedule is valid and the
	// operator keeps it; False with the reason when it cannot) and
	// Stalled, following kstatus.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lps
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="a LoopSchedule's name is at most 52 characters (its runs are named NAME-TIME)"
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Last Result",type=string,JSONPath=`.status.lastRun.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1

// LoopSchedule starts a Loop on a schedule, as a CronJob starts Jobs: each
// run is a Loop named from the schedule's name and the run's time, owned by
// the schedule.
type LoopSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is when to run which loop.
	// +required
	Spec LoopScheduleSpec `json:"spec"`

	// status is what the schedule did.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status LoopScheduleStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// LoopScheduleList is a list of LoopSchedules.
type LoopScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoopSchedule `json:"items"`
}
