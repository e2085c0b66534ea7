package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// PatchStatus writes the status of a Loop, from before's (read at before's
// resourceVersion: a conflict if the Loop changed meanwhile) to after's.
// The patch is what client.MergeFromWithOptimisticLock makes for a status
// change, built from the status alone: the spec and the metadata are
// neither copied nor encoded for every write. The API server answers with
// the Loop's metadata only: the watch brings the whole Loop to the cache
// anyway. after's resourceVersion becomes the new one.
func PatchStatus(ctx context.Context, c client.Client, before, after *v1alpha1.Loop) error {
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: after.Namespace, Name: after.Name}}
	target.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Loop"))
	if err := c.Status().Patch(ctx, target, statusPatch{before: before, after: after}); err != nil {
		return err
	}
	after.ResourceVersion = target.ResourceVersion
	return nil
}

// statusPatchBody is a status patch: the status's merge patch, and the
// resourceVersion it applies to.
type statusPatchBody struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Status json.RawMessage `json:"status"`
}

// statusPatch is the merge patch of a Loop's status from before to after.
type statusPatch struct{ before, after *v1alpha1.Loop }

var _ client.Patch = statusPatch{}

func (statusPatch) Type() types.PatchType { return types.MergePatchType }

func (p statusPatch) Data(client.Object) ([]byte, error) {
	if p.before.ResourceVersion == "" {
		return nil, fmt.Errorf("the status of Loop %s: no resourceVersion to patch against", p.before.Name)
	}
	from, err := json.Marshal(&p.before.Status)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(&p.after.Status)
	if err != nil {
		return nil, err
	}
	status, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, err
	}
	body := statusPatchBody{Status: status}
	body.Metadata.ResourceVersion = p.before.ResourceVersion
	return json.Marshal(body)
}
