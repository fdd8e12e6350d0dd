package fencepolicy

import (
	"encoding/json"
	"time"
)

// The fields of the objects the controller reads. Unknown fields are kept
// where an object is written back (raw maps), never dropped.

type objectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp time.Time         `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels,omitempty"`
	OwnerReferences   []ownerReference  `json:"ownerReferences,omitempty"`
}

type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller bool   `json:"controller,omitempty"`
}

// Condition is a metav1.Condition.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
}

// TargetRef is a FencePolicy target.
type TargetRef struct {
	Group       string `json:"group"`
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	SectionName string `json:"sectionName,omitempty"`
}

// PolicySpec is a FencePolicy's spec (the CRD's schema).
type PolicySpec struct {
	TargetRefs  []TargetRef `json:"targetRefs"`
	Key         string      `json:"key,omitempty"`
	KeyHeader   string      `json:"keyHeader,omitempty"`
	FenceHeader string      `json:"fenceHeader,omitempty"`
	Policy      string      `json:"policy,omitempty"`
	Mode        string      `json:"mode,omitempty"`
	Methods     string      `json:"methods,omitempty"`
	Proof       string      `json:"proof,omitempty"`
	Barrier     bool        `json:"barrier,omitempty"`
	MaxWrite    string      `json:"maxWrite,omitempty"`
	MaxWait     string      `json:"maxWait,omitempty"`
}

// PolicyStatus is a FencePolicy's status.
type PolicyStatus struct {
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	TableHash          string      `json:"tableHash,omitempty"`
	Entries            []string    `json:"entries,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
}

// FencePolicy is the custom resource.
type FencePolicy struct {
	Metadata objectMeta   `json:"metadata"`
	Spec     PolicySpec   `json:"spec"`
	Status   PolicyStatus `json:"status"`
}

type parentRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        *string `json:"kind,omitempty"`
	Namespace   *string `json:"namespace,omitempty"`
	Name        string  `json:"name"`
	SectionName *string `json:"sectionName,omitempty"`
	Port        *int    `json:"port,omitempty"`
}

type routeMatch struct {
	Path *struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"path,omitempty"`
	Method      string            `json:"method,omitempty"`
	Headers     []json.RawMessage `json:"headers,omitempty"`
	QueryParams []json.RawMessage `json:"queryParams,omitempty"`
}

type routeRule struct {
	Name    string       `json:"name,omitempty"`
	Matches []routeMatch `json:"matches,omitempty"`
}

// httpRoute is the part of a Gateway API HTTPRoute the controller reads.
type httpRoute struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		ParentRefs []parentRef `json:"parentRefs,omitempty"`
		Hostnames  []string    `json:"hostnames,omitempty"`
		Rules      []routeRule `json:"rules,omitempty"`
	} `json:"spec"`
	// Status.Parents: each parent's controller says whether it accepted
	// the route (RouteParentStatus).
	Status struct {
		Parents []struct {
			ParentRef      parentRef   `json:"parentRef"`
			ControllerName string      `json:"controllerName"`
			Conditions     []Condition `json:"conditions,omitempty"`
		} `json:"parents,omitempty"`
	} `json:"status"`
	raw json.RawMessage
}

type gateway struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		GatewayClassName string `json:"gatewayClassName"`
		Listeners        []struct {
			Name     string  `json:"name"`
			Hostname *string `json:"hostname,omitempty"`
			Port     int     `json:"port"`
		} `json:"listeners,omitempty"`
	} `json:"spec"`
}

type gatewayClass struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		ControllerName string `json:"controllerName"`
	} `json:"spec"`
}

// child is a data-plane object the controller emitted (any kind).
type child struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		// Envoy Gateway's policies: PolicyStatus (GEP-713 ancestors).
		Ancestors []struct {
			AncestorRef    json.RawMessage `json:"ancestorRef"`
			ControllerName string          `json:"controllerName"`
			Conditions     []Condition     `json:"conditions"`
		} `json:"ancestors"`
		// Istio: conditions of its own.
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
	raw map[string]any
}
