package main

import (
	"errors"
	"fmt"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// applyDefaults sets what the API server would set from the CRD's +kubebuilder:default markers,
// so that a plan made from a file equals the one the operator makes from the stored object.
// A test checks it against the generated CRD's defaults.
func applyDefaults(hcd *hicachev1alpha1.HiCacheDeployment) {
	spec := &hcd.Spec
	t := &spec.Topology
	setDefault(&t.TensorParallel, 1)
	setDefault(&t.PipelineParallel, 1)
	setDefault(&t.DataParallel, 1)
	setDefault(&t.GPUsPerNode, 8)
	if spec.Replicas == nil {
		one := int32(1)
		spec.Replicas = &one
	}
	setDefault(&spec.Rollout.MaxUnavailable, 1)
	if s := spec.Storage; s != nil {
		setDefault(&s.NamespaceStrategy, hicachev1alpha1.NamespaceLayoutHash)
		setDefault(&s.FlushPolicy, hicachev1alpha1.FlushAuto)
		setDefault(&s.Protocol, "tcp")
	}
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// validate checks the rules of the CRD whose breach would make a plan wrong rather than merely
// rejected: the required model path and the namespace of the Fixed strategy. Everything about
// the topology is checked by the resolver, which names the field.
func validate(hcd *hicachev1alpha1.HiCacheDeployment) error {
	spec := &hcd.Spec
	var errs []error
	if spec.Model.Path == "" {
		errs = append(errs, errors.New("spec.model.path is required: set the model path or hub id SGLang loads (--model-path)"))
	}
	if s := spec.Storage; s != nil {
		if s.BackendRef.Name == "" {
			errs = append(errs, errors.New("spec.storage.backendRef.name is required: name the CacheBackend in this namespace"))
		}
		fixed := s.NamespaceStrategy == hicachev1alpha1.NamespaceFixed
		switch {
		case fixed && s.Namespace == "":
			errs = append(errs, errors.New("spec.storage.namespace is required with the Fixed namespace strategy"))
		case !fixed && s.Namespace != "":
			errs = append(errs, fmt.Errorf("spec.storage.namespace %q is only used with namespaceStrategy Fixed; LayoutHash derives it from the layout", s.Namespace))
		}
	}
	return errors.Join(errs...)
}
