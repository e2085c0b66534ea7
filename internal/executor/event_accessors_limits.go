package executor

// The events of what limits a run: its budget, a state's cost ceiling,
// throttle and circuit, edge revisits, transient failures, sub-loops and
// learning gates. Each has a struct whose Data is the payload the log
// keeps and an accessor that reads it back.

// CycleDetectedEvent is a cycle_detected event: the edge From->To was
// taken Count times, over the loop's Max.
type CycleDetectedEvent struct {
	Edge, From, To string
	Count, Max     int32
}

// Data is the event's payload as the log keeps it.
func (e CycleDetectedEvent) Data() map[string]any {
	return map[string]any{"edge": e.Edge, "from": e.From, "to": e.To, "count": e.Count, "max": e.Max}
}

// CycleDetectedOf reads a cycle_detected event.
func CycleDetectedOf(e Event) CycleDetectedEvent {
	return CycleDetectedEvent{Edge: str(e.Data, "edge"), From: str(e.Data, "from"), To: str(e.Data, "to"),
		Count: num32(e.Data, "count"), Max: num32(e.Data, "max")}
}

// StallDetectedEvent is a stall_detected event: state State produced the
// same result (ExitCode, Verdict) Consecutive times in a row, or
// Recurrent times in all (one of the two is set).
type StallDetectedEvent struct {
	State                  string
	ExitCode               int
	Verdict                string
	Consecutive, Recurrent int32
	// Action is "abort", or "route:" and the state the run goes to.
	Action string
}

// Data is the event's payload as the log keeps it.
func (e StallDetectedEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "exit_code": e.ExitCode, "verdict": e.Verdict, "action": e.Action}
	if e.Consecutive > 0 {
		data["consecutive"] = e.Consecutive
	} else {
		data["recurrent"] = e.Recurrent
	}
	return data
}

// StallDetectedOf reads a stall_detected event.
func StallDetectedOf(e Event) StallDetectedEvent {
	return StallDetectedEvent{State: str(e.Data, "state"), ExitCode: int(num(e.Data, "exit_code")), Verdict: str(e.Data, "verdict"),
		Consecutive: num32(e.Data, "consecutive"), Recurrent: num32(e.Data, "recurrent"), Action: str(e.Data, "action")}
}

// ThrottleWarnEvent is a throttle_warn event: state State ran Count times
// in a row, its warning (WarnMax) of HardMax.
type ThrottleWarnEvent struct {
	State                   string
	Count, WarnMax, HardMax int32
}

// Data is the event's payload as the log keeps it.
func (e ThrottleWarnEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "count": e.Count, "warn_max": e.WarnMax, "hard_max": e.HardMax}
}

// ThrottleWarnOf reads a throttle_warn event.
func ThrottleWarnOf(e Event) ThrottleWarnEvent {
	return ThrottleWarnEvent{State: str(e.Data, "state"), Count: num32(e.Data, "count"), WarnMax: num32(e.Data, "warn_max"), HardMax: num32(e.Data, "hard_max")}
}

// ThrottleHardEvent is a throttle_hard event: state State reached its
// HardMax, and the run goes to Next ("" ends it).
type ThrottleHardEvent struct {
	State          string
	Count, HardMax int32
	Next           string
}

// Data is the event's payload as the log keeps it.
func (e ThrottleHardEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "count": e.Count, "hard_max": e.HardMax, "next": e.Next}
}

// ThrottleHardOf reads a throttle_hard event.
func ThrottleHardOf(e Event) ThrottleHardEvent {
	return ThrottleHardEvent{State: str(e.Data, "state"), Count: num32(e.Data, "count"), HardMax: num32(e.Data, "hard_max"), Next: str(e.Data, "next")}
}

// ThrottleStopEvent is a throttle_stop event: state State ran past its
// HardMax with nowhere to go; the run ends.
type ThrottleStopEvent struct {
	State          string
	Count, HardMax int32
}

// Data is the event's payload as the log keeps it.
func (e ThrottleStopEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "count": e.Count, "hard_max": e.HardMax}
}

// ThrottleStopOf reads a throttle_stop event.
func ThrottleStopOf(e Event) ThrottleStopEvent {
	return ThrottleStopEvent{State: str(e.Data, "state"), Count: num32(e.Data, "count"), HardMax: num32(e.Data, "hard_max")}
}

// RateLimitWaitingEvent is a rate_limit_waiting event: the action was
// rate-limited and runs again after WaitSeconds (try Attempt of Tier,
// "short" or "long_wait").
type RateLimitWaitingEvent struct {
	State, Tier string
	Attempt     int32
	WaitSeconds float64
	// NextAttemptAt is when it runs again, in Unix seconds.
	NextAttemptAt float64
	// TotalWaitedSeconds is what the waits add up to; BudgetSeconds the
	// most they may.
	TotalWaitedSeconds, BudgetSeconds float64
}

// Data is the event's payload as the log keeps it.
func (e RateLimitWaitingEvent) Data() map[string]any {
	return map[string]any{
		"state": e.State, "tier": e.Tier, "attempt": e.Attempt,
		"wait_seconds": e.WaitSeconds, "next_attempt_at": e.NextAttemptAt,
		"total_waited_seconds": e.TotalWaitedSeconds, "budget_seconds": e.BudgetSeconds,
	}
}

// RateLimitWaitingOf reads a rate_limit_waiting event.
func RateLimitWaitingOf(e Event) RateLimitWaitingEvent {
	return RateLimitWaitingEvent{State: str(e.Data, "state"), Tier: str(e.Data, "tier"), Attempt: num32(e.Data, "attempt"),
		WaitSeconds: flt(e.Data, "wait_seconds"), NextAttemptAt: flt(e.Data, "next_attempt_at"),
		TotalWaitedSeconds: flt(e.Data, "total_waited_seconds"), BudgetSeconds: flt(e.Data, "budget_seconds")}
}

// RateLimitExhaustedEvent is a rate_limit_exhausted event: the waits of a
// rate-limited action are spent, and the state goes to Next.
type RateLimitExhaustedEvent struct {
	State                              string
	Retries, ShortRetries, LongRetries int32
	TotalWaitSeconds                   float64
	Next                               string
}

// Data is the event's payload as the log keeps it.
func (e RateLimitExhaustedEvent) Data() map[string]any {
	return map[string]any{
		"state": e.State, "retries": e.Retries,
		"short_retries": e.ShortRetries, "long_retries": e.LongRetries,
		"total_wait_seconds": e.TotalWaitSeconds, "next": e.Next,
	}
}

// RateLimitExhaustedOf reads a rate_limit_exhausted event.
func RateLimitExhaustedOf(e Event) RateLimitExhaustedEvent {
	return RateLimitExhaustedEvent{State: str(e.Data, "state"), Retries: num32(e.Data, "retries"),
		ShortRetries: num32(e.Data, "short_retries"), LongRetries: num32(e.Data, "long_retries"),
		TotalWaitSeconds: flt(e.Data, "total_wait_seconds"), Next: str(e.Data, "next")}
}

// RateLimitStormEvent is a rate_limit_storm event: rate limits were
// exhausted Count times in a row.
type RateLimitStormEvent struct {
	State string
	Count int32
}

// Data is the event's payload as the log keeps it.
func (e RateLimitStormEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "count": e.Count}
}

// RateLimitStormOf reads a rate_limit_storm event.
func RateLimitStormOf(e Event) RateLimitStormEvent {
	return RateLimitStormEvent{State: str(e.Data, "state"), Count: num32(e.Data, "count")}
}

// TransientRetryEvent is an api_error_retry or infra_retry event: the
// action failed for that transient reason and runs again (try Attempt)
// after Backoff seconds.
type TransientRetryEvent struct {
	State   string
	Attempt int32
	Backoff float64
}

// Data is the event's payload as the log keeps it.
func (e TransientRetryEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "attempt": e.Attempt, "backoff": e.Backoff}
}

// TransientRetryOf reads an api_error_retry or infra_retry event.
func TransientRetryOf(e Event) TransientRetryEvent {
	return TransientRetryEvent{State: str(e.Data, "state"), Attempt: num32(e.Data, "attempt"), Backoff: flt(e.Data, "backoff")}
}

// TransientExhaustedEvent is an api_error_exhausted or
// infra_retry_exhausted event: the state used up its Retries of that kind,
// and its verdict routes as usual.
type TransientExhaustedEvent struct {
	State   string
	Retries int32
}

// Data is the event's payload as the log keeps it.
func (e TransientExhaustedEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "retries": e.Retries}
}

// TransientExhaustedOf reads an api_error_exhausted or
// infra_retry_exhausted event.
func TransientExhaustedOf(e Event) TransientExhaustedEvent {
	return TransientExhaustedEvent{State: str(e.Data, "state"), Retries: num32(e.Data, "retries")}
}

// BudgetWarningEvent is a budget_warning event: before state State the
// run spent WarnAtPercent of a limit: of its cost (MaxCostUSD set) or of
// its tokens (MaxTokens set).
type BudgetWarningEvent struct {
	State               string
	WarnAtPercent       int64
	CostUSD, MaxCostUSD float64
	Tokens, MaxTokens   int64
}

// Data is the event's payload as the log keeps it.
func (e BudgetWarningEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "warn_at_percent": e.WarnAtPercent}
	if e.MaxCostUSD > 0 {
		data["cost_usd"], data["max_cost_usd"] = e.CostUSD, e.MaxCostUSD
	} else {
		data["tokens"], data["max_tokens"] = e.Tokens, e.MaxTokens
	}
	return data
}

// BudgetWarningOf reads a budget_warning event.
func BudgetWarningOf(e Event) BudgetWarningEvent {
	return BudgetWarningEvent{State: str(e.Data, "state"), WarnAtPercent: num(e.Data, "warn_at_percent"),
		CostUSD: flt(e.Data, "cost_usd"), MaxCostUSD: flt(e.Data, "max_cost_usd"), Tokens: num(e.Data, "tokens"), MaxTokens: num(e.Data, "max_tokens")}
}

// BudgetExceededEvent is a budget_exceeded event: before state State the
// run spent a limit (Reason says which), and Action ("pause", "stop" or
// "route", to Next) follows.
type BudgetExceededEvent struct {
	State, Action, Reason string
	// Next is the state a "route" goes to; "" for the other actions.
	Next string
	// Child names the sub-loop whose budget paused the run; its event has
	// no spend of its own (CostUSD, Tokens, the limits).
	Child   string
	CostUSD float64
	Tokens  int64
	// MaxCostUSD and MaxTokens are the limits the spec sets; nil for none.
	MaxCostUSD *float64
	MaxTokens  *int64
}

// Data is the event's payload as the log keeps it.
func (e BudgetExceededEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "action": e.Action, "reason": e.Reason}
	if e.Child != "" {
		data["child"] = e.Child
		return data
	}
	data["cost_usd"], data["tokens"] = e.CostUSD, e.Tokens
	putLimits(data, e.MaxCostUSD, e.MaxTokens)
	if e.Next != "" {
		data["next"] = e.Next
	}
	return data
}

// BudgetExceededOf reads a budget_exceeded event.
func BudgetExceededOf(e Event) BudgetExceededEvent {
	return BudgetExceededEvent{State: str(e.Data, "state"), Action: str(e.Data, "action"), Reason: str(e.Data, "reason"),
		Next: str(e.Data, "next"), Child: str(e.Data, "child"), CostUSD: flt(e.Data, "cost_usd"), Tokens: num(e.Data, "tokens"),
		MaxCostUSD: optFlt(e.Data, "max_cost_usd"), MaxTokens: optNum(e.Data, "max_tokens")}
}

// BudgetResumedEvent is a budget_resumed event: a run paused on its budget
// goes on (the limits, MaxCostUSD and MaxTokens, were raised or the state
// it waits to enter no longer spends).
type BudgetResumedEvent struct {
	State      string
	MaxCostUSD *float64
	MaxTokens  *int64
}

// Data is the event's payload as the log keeps it.
func (e BudgetResumedEvent) Data() map[string]any {
	data := map[string]any{"state": e.State}
	putLimits(data, e.MaxCostUSD, e.MaxTokens)
	return data
}

// BudgetResumedOf reads a budget_resumed event.
func BudgetResumedOf(e Event) BudgetResumedEvent {
	return BudgetResumedEvent{State: str(e.Data, "state"), MaxCostUSD: optFlt(e.Data, "max_cost_usd"), MaxTokens: optNum(e.Data, "max_tokens")}
}

// putLimits writes the budget's limits that are set.
func putLimits(data map[string]any, maxCostUSD *float64, maxTokens *int64) {
	if maxCostUSD != nil {
		data["max_cost_usd"] = *maxCostUSD
	}
	if maxTokens != nil {
		data["max_tokens"] = *maxTokens
	}
}

// CostCeilingEvent is a cost_ceiling event: the visit of state State cost
// CostUSD, over its CeilingUSD (Exceeded: its verdict is error) or at its
// warning, WarnAtUSD.
type CostCeilingEvent struct {
	State                          string
	CostUSD, CeilingUSD, WarnAtUSD float64
	Exceeded                       bool
}

// Data is the event's payload as the log keeps it.
func (e CostCeilingEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "cost_usd": e.CostUSD, "exceeded": e.Exceeded}
	if e.Exceeded {
		data["cost_ceiling_usd"] = e.CeilingUSD
	} else {
		data["cost_warn_at_usd"] = e.WarnAtUSD
	}
	return data
}

// CostCeilingOf reads a cost_ceiling event.
func CostCeilingOf(e Event) CostCeilingEvent {
	return CostCeilingEvent{State: str(e.Data, "state"), CostUSD: flt(e.Data, "cost_usd"), CeilingUSD: flt(e.Data, "cost_ceiling_usd"),
		WarnAtUSD: flt(e.Data, "cost_warn_at_usd"), Exceeded: boolean(e.Data, "exceeded")}
}

// SubLoopStartEvent is a sub_loop_start event: state State runs loop Loop
// as its child, Child.
type SubLoopStartEvent struct {
	State, Loop, Child string
}

// Data is the event's payload as the log keeps it.
func (e SubLoopStartEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "loop": e.Loop, "child": e.Child}
}

// SubLoopStartOf reads a sub_loop_start event.
func SubLoopStartOf(e Event) SubLoopStartEvent {
	return SubLoopStartEvent{State: str(e.Data, "state"), Loop: str(e.Data, "loop"), Child: str(e.Data, "child")}
}

// SubLoopCompleteEvent is a sub_loop_complete event: the child of state
// State ended (TerminatedBy, its Verdict for the state), or, Lost, its
// result was lost (only Error says why).
type SubLoopCompleteEvent struct {
	State, Loop           string
	Lost                  bool
	TerminatedBy, Verdict string
	FailureTerminal       bool
	Error                 string
}

// Data is the event's payload as the log keeps it.
func (e SubLoopCompleteEvent) Data() map[string]any {
	data := map[string]any{"state": e.State, "loop": e.Loop}
	if e.Lost {
		data["error"] = e.Error
		return data
	}
	data["terminated_by"], data["verdict"] = e.TerminatedBy, e.Verdict
	if e.FailureTerminal {
		data["failure_terminal"] = true
	}
	if e.Error != "" {
		data["error"] = e.Error
	}
	return data
}

// SubLoopCompleteOf reads a sub_loop_complete event.
func SubLoopCompleteOf(e Event) SubLoopCompleteEvent {
	_, ended := e.Data["verdict"]
	return SubLoopCompleteEvent{State: str(e.Data, "state"), Loop: str(e.Data, "loop"), Lost: !ended, TerminatedBy: str(e.Data, "terminated_by"),
		Verdict: str(e.Data, "verdict"), FailureTerminal: boolean(e.Data, "failure_terminal"), Error: str(e.Data, "error")}
}

// LearningTargetStaleEvent is a learning_target_stale event: the gate
// found Target stale, for Cause.
type LearningTargetStaleEvent struct {
	State, Target, Cause string
}

// Data is the event's payload as the log keeps it.
func (e LearningTargetStaleEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "target": e.Target, "cause": e.Cause}
}

// LearningTargetStaleOf reads a learning_target_stale event.
func LearningTargetStaleOf(e Event) LearningTargetStaleEvent {
	return LearningTargetStaleEvent{State: str(e.Data, "state"), Target: str(e.Data, "target"), Cause: str(e.Data, "cause")}
}

// LearningExploreInvokedEvent is a learning_explore_invoked event: the
// gate explores Target, its Attempt-th time.
type LearningExploreInvokedEvent struct {
	State, Target string
	Attempt       int
}

// Data is the event's payload as the log keeps it.
func (e LearningExploreInvokedEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "target": e.Target, "attempt": e.Attempt}
}

// LearningExploreInvokedOf reads a learning_explore_invoked event.
func LearningExploreInvokedOf(e Event) LearningExploreInvokedEvent {
	return LearningExploreInvokedEvent{State: str(e.Data, "state"), Target: str(e.Data, "target"), Attempt: int(num(e.Data, "attempt"))}
}

// LearningTargetEvent is a learning_target_proven or
// learning_target_refuted event: the gate decided Target.
type LearningTargetEvent struct {
	State, Target string
}

// Data is the event's payload as the log keeps it.
func (e LearningTargetEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "target": e.Target}
}

// LearningTargetOf reads a learning_target_proven or
// learning_target_refuted event.
func LearningTargetOf(e Event) LearningTargetEvent {
	return LearningTargetEvent{State: str(e.Data, "state"), Target: str(e.Data, "target")}
}

// LearningBlockedEvent is a learning_blocked event: the gate is blocked
// on Target, for Reason.
type LearningBlockedEvent struct {
	State, Target, Reason string
}

// Data is the event's payload as the log keeps it.
func (e LearningBlockedEvent) Data() map[string]any {
	return map[string]any{"state": e.State, "target": e.Target, "reason": e.Reason}
}

// LearningBlockedOf reads a learning_blocked event.
func LearningBlockedOf(e Event) LearningBlockedEvent {
	return LearningBlockedEvent{State: str(e.Data, "state"), Target: str(e.Data, "target"), Reason: str(e.Data, "reason")}
}

// LearningCompleteEvent is a learning_complete event: the gate ended,
// with the Targets proven.
type LearningCompleteEvent struct {
	State   string
	Targets []string
}

// Data is the event's payload as the log keeps it (an empty list, never
// null, for no targets).
func (e LearningCompleteEvent) Data() map[string]any {
	targets := e.Targets
	if targets == nil {
		targets = []string{}
	}
	return map[string]any{"state": e.State, "targets": targets}
}

// LearningCompleteOf reads a learning_complete event.
func LearningCompleteOf(e Event) LearningCompleteEvent {
	return LearningCompleteEvent{State: str(e.Data, "state"), Targets: strs(e.Data, "targets")}
}
