package admission_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/admission"
)

// A writer that holds the lock on orders/42 with fence 000000000000007
// stamps what it writes, so the webhook can check it.
func ExampleAnnotate() {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	if err := admission.Annotate(cm, "orders/42", "000000000000007", admission.Annotations{}); err != nil {
		panic(err)
	}
	fmt.Println(cm.Annotations[admission.DefaultKeyAnnotation], cm.Annotations[admission.DefaultFenceAnnotation])
	// Output: orders/42 000000000000007
}

// The same stamp as a patch, for `kubectl patch configmap orders --type merge -p …`.
func ExampleMergePatch() {
	p, err := admission.MergePatch("orders/42", "000000000000007", admission.Annotations{})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(p))
	// Output: {"metadata":{"annotations":{"fencegate.io/fence":"000000000000007","fencegate.io/key":"orders/42"}}}
}
