// Package v1alpha1 holds the hicache.io/v1alpha1 API: HiCacheDeployment (SGLang serving groups
// with a hierarchical KV cache), CacheBackend (the shared L3 store) and CacheFlush (a request to
// remove stale L3 objects).
//
// +kubebuilder:object:generate=true
// +groupName=hicache.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "hicache.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
