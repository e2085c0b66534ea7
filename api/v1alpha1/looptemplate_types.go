package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ParameterType is the type of a loop's parameter.
// +kubebuilder:validation:Enum=string;integer;number;boolean;enum;path
type ParameterType string

// Parameter is a typed input a caller binds with a sub-loop state's with.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'enum' || (has(self.values) && size(self.values) > 0)",message="an enum parameter needs values"
type Parameter struct {
	// type of the value. Default string.
	// +optional
	Type ParameterType `json:"type,omitempty"`
	// required parameters must be bound by the caller.
	// +optional
	Required bool `json:"required,omitempty"`
	// default is the value when the caller binds none.
	// +optional
	Default *apiextensionsv1.JSON `json:"default,omitempty"`
	// description says what the parameter is for.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
	// values are the allowed values of an enum parameter.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Values []string `json:"values,omitempty"`
}

// LoopTemplateSpec is a loop definition that sub-loop states run.
type LoopTemplateSpec struct {
	// LoopSpec is the state machine a child Loop made from this template
	// runs, spelled as a Loop's spec; the child copies it when it is
	// created, so editing the template never changes a running child.
	LoopSpec `json:",inline"`

	// parameters are the typed inputs a caller binds with its state's with.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]Parameter `json:"parameters,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=lpt
// +kubebuilder:printcolumn:name="Initial",type=string,JSONPath=`.spec.initial`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// LoopTemplate is a loop that other Loops run as a sub-loop: a state with
// loop: NAME makes the operator create a child Loop from the LoopTemplate
// NAME of the same namespace.
type LoopTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the loop definition.
	// +required
	Spec LoopTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// LoopTemplateList is a list of LoopTemplates.
type LoopTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoopTemplate `json:"items"`
}
