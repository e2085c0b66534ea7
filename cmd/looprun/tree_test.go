package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

func treeLoop(name string, uid string, parent *v1alpha1.Loop, created int) v1alpha1.Loop {
	l := v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid),
		CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))}}
	if parent != nil {
		l.Labels = map[string]string{v1alpha1.LabelParent: parent.Name, v1alpha1.LabelTemplate: "tpl-" + name}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop", Name: parent.Name, UID: parent.UID, Controller: ptr.To(true)}}
	}
	return l
}

func TestLoopTreePutsChildrenUnderTheirParent(t *testing.T) {
	a := treeLoop("a", "ua", nil, 1)
	b := treeLoop("b", "ub", nil, 2)
	a2 := treeLoop("a-second", "ua2", &a, 5)
	a1 := treeLoop("a-first", "ua1", &a, 4)
	a11 := treeLoop("a-first-deep", "ua11", &a1, 6)
	orphan := treeLoop("orphan", "uo", &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "ugone"}}, 3)
	var got []string
	for _, r := range loopTree([]v1alpha1.Loop{a11, b, a2, orphan, a, a1}) {
		got = append(got, strings.Repeat(".", r.depth)+r.loop.Name)
	}
	want := "b,orphan,a,.a-first,..a-first-deep,.a-second"
	if strings.Join(got, ",") != want {
		t.Fatalf("tree %s, want %s", strings.Join(got, ","), want)
	}
	var out bytes.Buffer
	if err := describeChildren(&out, &a, []v1alpha1.Loop{a2, a1, a11}, time.Unix(10, 0)); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "Children:") || strings.Index(s, "a-first") > strings.Index(s, "a-second") || strings.Contains(s, "a-first-deep") {
		t.Fatalf("children of a:\n%s", s)
	}
}
