package loopfile

import (
	"encoding/json"

	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
)

// ManifestYAML renders a Loop as a clean manifest: no status, no empty metadata.
func ManifestYAML(loop *v1alpha1.Loop) ([]byte, error) {
	m := map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "Loop",
	}
	meta := map[string]any{"name": KubernetesName(loop.Name)}
	if len(loop.Annotations) > 0 {
		meta["annotations"] = loop.Annotations
	}
	m["metadata"] = meta
	specJSON, err := json.Marshal(loop.Spec)
	if err != nil {
		return nil, err
	}
	var spec any
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return nil, err
	}
	m["spec"] = spec
	return yaml.Marshal(m)
}
