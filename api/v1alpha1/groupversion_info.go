// Package v1alpha1 contains the looprun.io/v1alpha1 API: the Loop resource.
// +kubebuilder:object:generate=true
// +groupName=looprun.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the Loop API.
	GroupVersion = schema.GroupVersion{Group: "looprun.io", Version: "v1alpha1"}

	// SchemeBuilder registers the Loop types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Loop types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &Loop{}, &LoopList{}, &LoopTemplate{}, &LoopTemplateList{}, &LoopSchedule{}, &LoopScheduleList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
