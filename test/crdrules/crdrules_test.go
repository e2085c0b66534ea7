// Package crdrules checks the Loop CRD's CEL rules against executor.Validate:
// a spec that breaks a rule is refused by both the API server and Validate,
// which name the same field; where they differ on purpose, the case says why.
package crdrules

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/fixture"
)

// ruleCase is a spec that breaks one CEL rule of the Loop CRD.
type ruleCase struct {
	// rule is the rule's CEL text, as in the CRD.
	rule string
	// spec is the Loop's spec, as YAML.
	spec string
	// field is the field at fault, as Validate names it. The API server
	// names the object the rule is on, an ancestor of it (spec,
	// spec.states[a]), which must hold it.
	field string
	// message is part of the API server's message; the rule's own message
	// when empty.
	message string
	// notValidated says why Validate does not check the rule ("" when it
	// does).
	notValidated string
}

// clusterOnly is why Validate leaves spec.runner.workspace to the CRD: it
// describes a cluster volume, which a local run (`looprun run`) neither has
// nor reads, and every Loop a cluster runner runs passed the API server.
const clusterOnly = "spec.runner.workspace describes the cluster's volume: a local run has none, and every Loop the operator runs passed these rules at admission"

var ruleCases = []ruleCase{
	{rule: "self.initial in self.states", field: "spec.initial", message: "initial nope is not a state",
		spec: `{initial: nope, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "self.states.exists(k, has(self.states[k].terminal) && self.states[k].terminal)", field: "spec.states",
		spec: `{initial: a, states: {a: {action: "true", next: b}, b: {action: "true", next: a}}}`},
	{rule: "self.states.all(k, !has(self.states[k].next) || self.states[k].next in self.states)", field: "spec.states[a].next",
		message: "state a: next nope is not a state", spec: `{initial: a, states: {a: {action: "true", next: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onMaintain) || self.states[k].onMaintain in self.states)", field: "spec.states[a].onMaintain",
		message: "state a: onMaintain nope is not a state",
		spec:    `{initial: a, states: {a: {action: "true", next: done, onMaintain: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onRetryExhausted) || self.states[k].onRetryExhausted in self.states)",
		field: "spec.states[a].onRetryExhausted", message: "state a: onRetryExhausted nope is not a state",
		spec: `{initial: a, states: {a: {action: "true", next: done, maxRetries: 2, onRetryExhausted: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onSuccess) || self.states[k].onSuccess == '$current' || self.states[k].onSuccess in self.states)",
		field: "spec.states[a].onSuccess", message: "state a: onSuccess nope is not a state",
		spec: `{initial: a, states: {a: {action: "true", onSuccess: nope, onFailure: done}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onFailure) || self.states[k].onFailure == '$current' || self.states[k].onFailure in self.states)",
		field: "spec.states[a].onFailure", message: "state a: onFailure nope is not a state",
		spec: `{initial: a, states: {a: {action: "true", onSuccess: done, onFailure: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onError) || self.states[k].onError == '$current' || self.states[k].onError in self.states)",
		field: "spec.states[a].onError", message: "state a: onError nope is not a state",
		spec: `{initial: a, states: {a: {action: "true", onSuccess: done, onError: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].route) || self.states[k].route.all(v, self.states[k].route[v] == '$current' || self.states[k].route[v] in self.states))",
		field: "spec.states[a].route[success]", message: "state a: a route target is not a state",
		spec: `{initial: a, states: {a: {action: "true", route: {success: nope, failure: done}}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].route) || self.states[k].route.all(v, self.states[k].route[v] == '$current' || self.states[k].route[v] in self.states))",
		field: "spec.states[a].route[success]", message: "state a: a route target is not a state",
		spec: `{initial: a, states: {a: {action: "true", route: {success: "", failure: done}}, done: {terminal: true}}}`},
	{rule: "!has(self.budget) || !has(self.budget.state) || self.budget.state in self.states", field: "spec.budget.state",
		message: "budget.state nope is not a state",
		spec:    `{initial: a, budget: {maxTokens: 10, onExceeded: Route, state: nope}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].onThrottleHard) || self.states[k].onThrottleHard == '$current' || self.states[k].onThrottleHard in self.states)",
		field: "spec.states[a].onThrottleHard",
		spec:  `{initial: a, states: {a: {action: "true", next: done, onThrottleHard: nope}, done: {terminal: true}}}`},
	{rule: "self.states.all(k, !has(self.states[k].rateLimit) || !has(self.states[k].rateLimit.onExhausted) || self.states[k].rateLimit.onExhausted in self.states)",
		field: "spec.states[a].rateLimit.onExhausted",
		spec:  `{initial: a, states: {a: {action: "true", next: done, rateLimit: {onExhausted: nope}}, done: {terminal: true}}}`},
	{rule: "!has(self.onMaxIterations) || self.onMaxIterations in self.states", field: "spec.onMaxIterations",
		spec: `{initial: a, onMaxIterations: nope, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.onMaxPasses) || self.onMaxPasses in self.states", field: "spec.onMaxPasses",
		spec: `{initial: a, onMaxPasses: nope, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.circuit) || !has(self.circuit.repeatedFailure) || !has(self.circuit.repeatedFailure.onRepeatedFailure) || self.circuit.repeatedFailure.onRepeatedFailure == 'abort' || self.circuit.repeatedFailure.onRepeatedFailure in self.states",
		field: "spec.circuit.repeatedFailure.onRepeatedFailure",
		spec:  `{initial: a, circuit: {repeatedFailure: {onRepeatedFailure: nope}}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "has(self.maxCostUSD) || has(self.maxTokens)", field: "spec.budget",
		spec: `{initial: a, budget: {warnAt: 80}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "(has(self.onExceeded) && self.onExceeded == 'Route') == has(self.state)", field: "spec.budget.state",
		spec: `{initial: a, budget: {maxTokens: 10, state: done}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "(has(self.onExceeded) && self.onExceeded == 'Route') == has(self.state)", field: "spec.budget.state",
		spec: `{initial: a, budget: {maxTokens: 10, onExceeded: Route}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "!(has(self.claimName) && has(self.volumeClaimTemplate))", field: "spec.runner.workspace", notValidated: clusterOnly,
		spec: `{initial: a, runner: {workspace: {claimName: w, volumeClaimTemplate: {resources: {requests: {storage: 1Gi}}}}}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.git) || has(self.claimName) || has(self.volumeClaimTemplate)", field: "spec.runner.workspace",
		notValidated: "a local run clones into its own directory and needs no volume (validateGit)",
		spec:         `{initial: a, runner: {workspace: {git: {url: "https://example.com/r.git"}}}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "isCIDR(self)", field: "spec.runner.network.allow[0].cidr",
		notValidated: "spec.runner.network is the cluster's NetworkPolicy: a local run has none (the operator refuses an older object's bad block as the step's error, InvalidEgress)",
		spec:         `{initial: a, runner: {network: {allow: [{cidr: github.com}]}}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "!self.startsWith('/') && !self.split('/').exists(p, p == '..')", field: "spec.runner.workspace.workingDir", notValidated: clusterOnly,
		spec: `{initial: a, runner: {workspace: {claimName: w, workingDir: ../x}}, states: {a: {action: "true", next: done}, done: {terminal: true}}}`},
	{rule: "(has(self.terminal) && self.terminal) || has(self.next) || has(self.route) || has(self.onSuccess) || has(self.onFailure) || has(self.onError)",
		field: "spec.states[a]", spec: `{initial: a, states: {a: {action: "true"}, done: {terminal: true}}}`},
	{rule: "!has(self.next) || self.next != '$current'", field: "spec.states[a].next",
		spec: `{initial: a, states: {a: {action: "true", next: $current}, done: {terminal: true}}}`},
	{rule: "!has(self.maxRetries) || has(self.onRetryExhausted)", field: "spec.states[a].onRetryExhausted",
		spec: `{initial: a, states: {a: {action: "true", next: done, maxRetries: 2}, done: {terminal: true}}}`},
	{rule: "!has(self.onRetryExhausted) || has(self.maxRetries) || has(self.retryPolicy)", field: "spec.states[a].maxRetries",
		spec: `{initial: a, states: {a: {action: "true", next: done, onRetryExhausted: done}, done: {terminal: true}}}`},
	{rule: "!has(self.__loop__) || !has(self.action)", field: "spec.states[a].loop",
		spec: `{initial: a, states: {a: {action: "true", loop: child, next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.params) || (has(self.actionType) && self.actionType == 'mcp')", field: "spec.states[a].params",
		spec: `{initial: a, states: {a: {action: "true", params: {x: 1}, next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.learning) || (!has(self.action) && !has(self.__loop__))", field: "spec.states[a].learning",
		spec: `{initial: a, states: {a: {action: "true", learning: {targets: [x]}, next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.worktree) || has(self.__loop__)", field: "spec.states[a].loop",
		spec: `{initial: a, states: {a: {action: "true", worktree: w, next: done}, done: {terminal: true}}}`},
	{rule: "!has(self.approval) || (!has(self.action) && !has(self.__loop__) && !has(self.learning) && !has(self.next) && !has(self.evaluate) && !(has(self.terminal) && self.terminal))",
		field: "spec.states[a].approval",
		spec:  `{initial: a, states: {a: {action: "true", approval: {message: "go on?"}, onSuccess: done, onFailure: done}, done: {terminal: true}}}`},
	{rule: "has(self.targets) != has(self.targetsCSV)", field: "spec.states[a].learning.targets",
		spec: `{initial: a, states: {a: {learning: {targets: [x], targetsCSV: x}, next: done}, done: {terminal: true}}}`},
}

// reverseCase is a spec Validate refuses for a reason a CEL rule covers
// too, or one a reader would expect it to.
type reverseCase struct {
	name, spec, field string
	// notInCEL says why the API server accepts it ("" when it refuses it).
	notInCEL string
}

var reverseCases = []reverseCase{
	{name: "a route to a template", field: "spec.states[a].route[success]",
		spec: `{initial: a, states: {a: {action: "true", route: {success: "${captured.x}", failure: done}}, done: {terminal: true}}}`},
	{name: "onMaintain to $current", field: "spec.states[a].onMaintain",
		spec: `{initial: a, states: {a: {action: "true", next: done, onMaintain: $current}, done: {terminal: true}}}`},
	{name: "onRetryExhausted to $current", field: "spec.states[a].onRetryExhausted",
		spec: `{initial: a, states: {a: {action: "true", next: done, maxRetries: 1, onRetryExhausted: $current}, done: {terminal: true}}}`},
	{name: "learning with neither targets nor targetsCSV", field: "spec.states[a].learning.targets",
		spec: `{initial: a, states: {a: {learning: {maxRetries: 1}, next: done}, done: {terminal: true}}}`},
	{name: "approval on a terminal state", field: "spec.states[done].approval",
		spec: `{initial: a, states: {a: {action: "true", next: done}, done: {terminal: true, approval: {message: "end?"}}}}`},
}

// acceptedSpecs are taken by both: the rules refuse no more than they say.
var acceptedSpecs = []string{
	`{initial: a, states: {a: {action: "true", route: {success: $current, _: done}, onThrottleHard: $current}, done: {terminal: true}}}`,
	`{initial: a, onMaxIterations: done, onMaxPasses: done, circuit: {repeatedFailure: {onRepeatedFailure: abort}}, states: {a: {action: "true", next: done, rateLimit: {maxRetries: 2}}, done: {terminal: true}}}`,
	`{initial: a, circuit: {repeatedFailure: {onRepeatedFailure: done}}, states: {a: {action: "true", next: done, rateLimit: {onExhausted: done}}, done: {terminal: true}}}`,
	`{initial: a, budget: {maxCostUSD: "1", onExceeded: Route, state: done}, states: {a: {action: "true", onSuccess: done, onError: $current, maxRetries: 1, onRetryExhausted: done}, done: {terminal: true}}}`,
}

// crdRule is one x-kubernetes-validations rule and the schema node it is on.
type crdRule struct{ at, rule, message string }

// crdRules reads the rules of the Loop CRD as rendered in config/crd/bases.
func crdRules(t *testing.T) []crdRule {
	t.Helper()
	root, err := fixture.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "looprun.io_loops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var out []crdRule
	var walk func(s *apiextensionsv1.JSONSchemaProps, at string)
	walk = func(s *apiextensionsv1.JSONSchemaProps, at string) {
		for _, v := range s.XValidations {
			out = append(out, crdRule{at: at, rule: v.Rule, message: v.Message})
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range s.Properties {
				if !yield(k) {
					return
				}
			}
		}) {
			p := s.Properties[k]
			walk(&p, at+"."+k)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(s.Items.Schema, at+"[*]")
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(s.AdditionalProperties.Schema, at+"[*]")
		}
	}
	for _, v := range crd.Spec.Versions {
		walk(v.Schema.OpenAPIV3Schema, "")
	}
	return out
}

// Every CEL rule of the Loop CRD has a case: a rule added without one
// fails here.
func TestEveryRuleHasACase(t *testing.T) {
	rules := crdRules(t)
	if len(rules) < 20 {
		t.Fatalf("only %d rules found in the CRD", len(rules))
	}
	for _, r := range rules {
		if !slices.ContainsFunc(ruleCases, func(c ruleCase) bool { return c.rule == r.rule }) {
			t.Errorf("the rule at %s has no case in ruleCases: %s", r.at, r.rule)
		}
	}
	for _, c := range ruleCases {
		if !slices.ContainsFunc(rules, func(r crdRule) bool { return r.rule == c.rule }) {
			t.Errorf("no rule of the CRD is %s", c.rule)
		}
	}
}

// under reports whether field is at or under the path at.
func under(field, at string) bool {
	return field == at || strings.HasPrefix(field, at+".") || strings.HasPrefix(field, at+"[")
}

// apiCauses is what the API server says of a Loop with spec (a dry run):
// the fields and messages of its refusal, nil when it accepts it.
func apiCauses(t *testing.T, c client.Client, spec map[string]any) []string {
	t.Helper()
	loop := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Loop",
		"metadata": map[string]any{"name": "case", "namespace": "default"}, "spec": spec,
	}}
	err := c.Create(t.Context(), loop, client.DryRunAll)
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("the API server: %v", err)
	}
	var out []string
	for _, cause := range status.Status().Details.Causes {
		out = append(out, cause.Field+": "+cause.Message)
	}
	return out
}

// validateFields are the fields Validate names for spec.
func validateFields(t *testing.T, raw []byte) []string {
	t.Helper()
	var spec v1alpha1.LoopSpec
	if err := yaml.UnmarshalStrict(raw, &spec); err != nil {
		t.Fatalf("spec: %v", err)
	}
	var out []string
	for _, e := range executor.Validate(&spec) {
		out = append(out, e.Field)
	}
	return out
}

func decode(t *testing.T, spec string) ([]byte, map[string]any) {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatalf("spec %s: %v", spec, err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return raw, m
}

func TestCELAndValidateAgree(t *testing.T) {
	_, c, stop, err := fixture.StartEnv(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rules := crdRules(t)

	// The API server takes the spec every case starts from, and so does
	// Validate.
	base := `{initial: a, states: {a: {action: "true", next: done}, done: {terminal: true}}}`
	raw, m := decode(t, base)
	if causes := apiCauses(t, c, m); causes != nil {
		t.Fatalf("the base spec is refused: %v", causes)
	}
	if fields := validateFields(t, raw); fields != nil {
		t.Fatalf("Validate refuses the base spec: %v", fields)
	}

	for _, tc := range ruleCases {
		i := slices.IndexFunc(rules, func(r crdRule) bool { return r.rule == tc.rule })
		if i < 0 {
			continue // TestEveryRuleHasACase says so
		}
		rule := rules[i]
		t.Run(tc.field+" "+cmpOr(tc.message, rule.message), func(t *testing.T) {
			raw, m := decode(t, tc.spec)
			want := cmpOr(tc.message, rule.message)
			causes := apiCauses(t, c, m)
			if !slices.ContainsFunc(causes, func(s string) bool {
				f, msg, _ := strings.Cut(s, ": ")
				return under(tc.field, f) && strings.Contains(msg, want)
			}) {
				t.Errorf("the API server: %q; want %q on %s or above it", causes, want, tc.field)
			}
			fields := validateFields(t, raw)
			switch {
			case tc.notValidated != "" && len(fields) > 0:
				t.Errorf("Validate now refuses it (%v): drop notValidated", fields)
			case tc.notValidated == "" && !slices.Contains(fields, tc.field):
				t.Errorf("Validate names %v; want %s", fields, tc.field)
			}
		})
	}

	for i, spec := range acceptedSpecs {
		raw, m := decode(t, spec)
		if causes := apiCauses(t, c, m); causes != nil {
			t.Errorf("accepted spec %d: the API server refuses it: %q", i, causes)
		}
		if fields := validateFields(t, raw); fields != nil {
			t.Errorf("accepted spec %d: Validate refuses it: %v", i, fields)
		}
	}

	for _, tc := range reverseCases {
		t.Run("reverse "+tc.name, func(t *testing.T) {
			raw, m := decode(t, tc.spec)
			if fields := validateFields(t, raw); !slices.Contains(fields, tc.field) {
				t.Errorf("Validate names %v; want %s", fields, tc.field)
			}
			causes := apiCauses(t, c, m)
			refused := slices.ContainsFunc(causes, func(s string) bool {
				f, _, _ := strings.Cut(s, ": ")
				return under(tc.field, f)
			})
			switch {
			case tc.notInCEL != "" && refused:
				t.Errorf("the API server now refuses it (%q): drop notInCEL", causes)
			case tc.notInCEL == "" && !refused:
				t.Errorf("the API server: %q; want a refusal on %s or above it", causes, tc.field)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
