package controllers

import (
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
)

// templateAncestry is the LoopTemplates a Loop's ancestors and the Loop
// itself run, outermost first, by their full names (never the label
// values, which shorten a long name): where a sub-loop finds a cycle.
func templateAncestry(loop *v1alpha1.Loop) []string {
	var ancestry []string
	if a := loop.Annotations[v1alpha1.AnnotationAncestry]; a != "" {
		ancestry = strings.Split(a, "/")
	}
	t := loop.Annotations[v1alpha1.AnnotationTemplate]
	if t == "" {
		t = loop.Labels[v1alpha1.LabelTemplate] // a child made before the annotation
	}
	if t != "" {
		ancestry = append(ancestry, t)
	}
	return ancestry
}

// childAnnotations are the annotations of a child Loop that runs
// template below ancestry (see templateAncestry).
func childAnnotations(ancestry []string, template string) map[string]string {
	a := map[string]string{v1alpha1.AnnotationTemplate: template}
	if len(ancestry) > 0 {
		a[v1alpha1.AnnotationAncestry] = strings.Join(ancestry, "/")
	}
	return a
}
