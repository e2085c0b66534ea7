package v1alpha1

// BudgetAction is what a loop does when its budget is spent.
// +kubebuilder:validation:Enum=Pause;Stop;Route
type BudgetAction string

const (
	// BudgetPause holds the loop before its next state that spends, until
	// the budget is raised (the default).
	BudgetPause BudgetAction = "Pause"
	// BudgetStop ends the run (Failed, terminatedBy budget_exceeded).
	BudgetStop BudgetAction = "Stop"
	// BudgetRoute goes to budget.state instead of the state that would spend.
	BudgetRoute BudgetAction = "Route"
)

// Budget bounds what a loop spends on agents and the LLM judge.
// +kubebuilder:validation:XValidation:rule="has(self.maxCostUSD) || has(self.maxTokens)",message="a budget needs maxCostUSD or maxTokens"
// +kubebuilder:validation:XValidation:rule="(has(self.onExceeded) && self.onExceeded == 'Route') == has(self.state)",message="onExceeded Route needs state, and state is only for Route"
type Budget struct {
	// maxCostUSD is the most the run may spend, in US dollars, as a
	// decimal string ("5", "2.50"). Cost is computed from the tokens each
	// agent action and judge call reported and the price table. "0" means
	// nothing may be spent: no state that spends is entered.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,6})?$`
	MaxCostUSD string `json:"maxCostUSD,omitempty"`

	// maxTokens is the most tokens the run may use: input, output, cache
	// read and cache creation together. 0 means none may be used.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxTokens *int64 `json:"maxTokens,omitempty"`

	// warnAt is the share of a limit, in percent, at which a warning is
	// given once (an event, and a Kubernetes Event in a cluster). Default 80.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	WarnAt *int32 `json:"warnAt,omitempty"`

	// onExceeded is what happens when a state that spends is about to be
	// entered with the budget spent: Pause (default) holds the loop, phase
	// Paused, until the budget is raised; Stop ends it; Route goes to state.
	// +optional
	OnExceeded BudgetAction `json:"onExceeded,omitempty"`

	// state is where Route goes; it is entered even when it spends.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	State string `json:"state,omitempty"`
}

// CostCeiling bounds one visit of a state (little-loops cost_ceiling).
type CostCeiling struct {
	// maxCostUSD: a visit whose agent action and judge call cost more
	// ends with the verdict error (its onError route), and the agent CLI
	// is told the same limit. A decimal string of US dollars.
	// little-loops: cost_ceiling_per_state.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,6})?$`
	MaxCostUSD string `json:"maxCostUSD,omitempty"`

	// warnAtUSD: a visit costing this much or more gives a warning event.
	// little-loops: cost_warn_at.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,6})?$`
	WarnAtUSD string `json:"warnAtUSD,omitempty"`
}
