package admission

import (
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/lockstore"
)

// Annotate stamps key and fence on obj (any typed Kubernetes object), the
// way a writer holding the lock marks what it writes. It validates both
// first, so that a bad value is refused here rather than by the webhook.
func Annotate(obj metav1.Object, key, fence string, names Annotations) error {
	if err := validStamp(key, fence); err != nil {
		return err
	}
	names = names.withDefaults()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[names.Key], ann[names.Fence] = key, fence
	obj.SetAnnotations(ann)
	return nil
}

// AnnotateUnstructured does what Annotate does on an object decoded from JSON
// or YAML into a map (as the CLI reads manifests), creating metadata and
// metadata.annotations when absent.
func AnnotateUnstructured(obj map[string]any, key, fence string, names Annotations) error {
	if err := validStamp(key, fence); err != nil {
		return err
	}
	if obj == nil {
		return errors.New("admission: nil object")
	}
	names = names.withDefaults()
	meta, err := childMap(obj, "metadata")
	if err != nil {
		return err
	}
	ann, err := childMap(meta, "annotations")
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	ann[names.Key], ann[names.Fence] = key, fence
	return nil
}

// MergePatch returns a JSON merge patch that stamps key and fence, for
// `kubectl patch --type merge -p "$(…)"` or a PATCH with content type
// application/merge-patch+json.
func MergePatch(key, fence string, names Annotations) ([]byte, error) {
	if err := validStamp(key, fence); err != nil {
		return nil, err
	}
	names = names.withDefaults()
	return json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations": map[string]string{names.Key: key, names.Fence: fence},
		},
	})
}

func validStamp(key, fence string) error {
	if _, err := lockstore.NormalizeKey(key); err != nil {
		return fmt.Errorf("admission: annotate: %w", err)
	}
	if !lockstore.ValidFence(fence) {
		return fmt.Errorf("admission: annotate: fence %q is not 15 digits", fence)
	}
	return nil
}

func childMap(m map[string]any, name string) (map[string]any, error) {
	switch v := m[name].(type) {
	case nil:
		c := map[string]any{}
		m[name] = c
		return c, nil
	case map[string]any:
		return v, nil
	default:
		return nil, fmt.Errorf("admission: annotate: %s is a %T, not an object", name, v)
	}
}
