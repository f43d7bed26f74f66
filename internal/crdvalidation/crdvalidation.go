// Package crdvalidation admits objects of the hicache.io API offline, as the API server does when
// they are created: the committed CRD's structural schema drops nulls and fills in the defaults,
// then the OpenAPI schema, the object's metadata, the list types, the scale subresource and the
// CEL rules (x-kubernetes-validations) judge it. It composes the packages of
// k8s.io/apiextensions-apiserver that the server itself runs (pkg/apiserver/schema and its
// defaulting, objectmeta, listtype and cel packages, pkg/apiserver/validation), in the order of
// its customresource strategy, so a refusal here has the server's words.
package crdvalidation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/operation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/config/crd"
)

// Validator admits the objects of a set of CustomResourceDefinitions.
type Validator struct {
	kinds map[schema.GroupVersionKind]*kind
}

// kind is one served version of a CRD, ready to default and validate.
type kind struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
	status     bool
	scale      *apiextensions.CustomResourceSubresourceScale
}

// Default is the Validator of the CRDs embedded from config/crd/bases, built once.
var Default = sync.OnceValues(func() (*Validator, error) {
	bases, err := fs.Sub(crd.Bases, "bases")
	if err != nil {
		return nil, err
	}
	return Load(bases)
})

// Load reads every *.yaml CustomResourceDefinition at the top of fsys.
func Load(fsys fs.FS) (*Validator, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no CustomResourceDefinition found")
	}
	v := &Validator{kinds: map[schema.GroupVersionKind]*kind{}}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(f), err)
		}
		if err := v.add(crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(f), err)
		}
	}
	return v, nil
}

// add prepares every served version of crd the way the API server's CRD handler does.
func (v *Validator) add(crd *apiextensionsv1.CustomResourceDefinition) error {
	for _, ver := range crd.Spec.Versions {
		if !ver.Served || ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(ver.Schema, internal, nil); err != nil {
			return fmt.Errorf("version %s: %w", ver.Name, err)
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("version %s: the schema is not structural: %w", ver.Name, err)
		}
		s = s.DeepCopy()
		if err := defaulting.PruneDefaults(s); err != nil {
			return fmt.Errorf("version %s: %w", ver.Name, err)
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("version %s: %w", ver.Name, err)
		}
		k := &kind{
			gvk:        schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind},
			namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			structural: s,
			validator:  validator,
			cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
		}
		if sub := ver.Subresources; sub != nil {
			k.status = sub.Status != nil
			if sub.Scale != nil {
				k.scale = &apiextensions.CustomResourceSubresourceScale{
					SpecReplicasPath:   sub.Scale.SpecReplicasPath,
					StatusReplicasPath: sub.Scale.StatusReplicasPath,
					LabelSelectorPath:  sub.Scale.LabelSelectorPath,
				}
			}
		}
		v.kinds[k.gvk] = k
	}
	return nil
}

// Knows reports whether the validator has a schema for gvk.
func (v *Validator) Knows(gvk schema.GroupVersionKind) bool { return v.kinds[gvk] != nil }

// Admit does to obj what the API server does to a request creating it in namespace (used when
// obj names none). It returns the object the server would validate, decoded as the server
// decodes JSON (whole numbers as int64), its nulls dropped and the CRD's defaults filled in, its
// status dropped when the CRD has a status subresource; and every reason the server would
// refuse it with: none means the server accepts it. The error is for an object of a kind the
// validator does not know.
func (v *Validator) Admit(ctx context.Context, obj map[string]any, namespace string) (map[string]any, field.ErrorList, error) {
	return v.admit(ctx, obj, namespace, false)
}

// AdmitStatus is Admit for a write of obj's status subresource: the status is kept and
// validated with the rest, against the schema and the rules that need no old object (the
// server also runs transition rules against the stored object, which AdmitStatus has not).
func (v *Validator) AdmitStatus(ctx context.Context, obj map[string]any, namespace string) (map[string]any, field.ErrorList, error) {
	return v.admit(ctx, obj, namespace, true)
}

func (v *Validator) admit(ctx context.Context, obj map[string]any, namespace string, keepStatus bool) (map[string]any, field.ErrorList, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, err
	}
	decoded := map[string]any{}
	if err := utiljson.Unmarshal(b, &decoded); err != nil {
		return nil, nil, err
	}
	u := &unstructured.Unstructured{Object: decoded}
	gvk := u.GroupVersionKind()
	k := v.kinds[gvk]
	if k == nil {
		return nil, nil, fmt.Errorf("no CustomResourceDefinition serves %s", gvk)
	}
	// Decoding: nulls without a default go, then the defaults come in.
	defaulting.PruneNonNullableNullsWithoutDefaults(decoded, k.structural)
	defaulting.Default(decoded, k.structural)
	// Creating: status belongs to the status subresource; the namespace is the request's.
	if k.status && !keepStatus {
		delete(decoded, "status")
	}
	if k.namespaced && u.GetNamespace() == "" && namespace != "" {
		u.SetNamespace(namespace)
	}
	return decoded, k.validate(ctx, u), nil
}

// validate is the customresource strategy's Validate for a create.
func (k *kind) validate(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	meta, metaErrs := objectMeta(u)
	if len(metaErrs) > 0 {
		errs = append(errs, metaErrs...)
	} else {
		errs = append(errs, metavalidation.ValidateObjectMetaDeclaratively(ctx, operation.Create, meta, nil, k.namespaced,
			metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))...)
	}
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), k.validator)...)
	errs = append(errs, k.validateScale(u)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, k.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, k.structural, u.Object)...)
	if blocked, err := hasBlockingErr(errs); blocked {
		errs = append(errs, err)
	} else {
		celErrs, _ := k.cel.Validate(ctx, nil, k.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// objectMeta reads the object's metadata as the API server's validator does.
func objectMeta(u *unstructured.Unstructured) (*metav1.ObjectMeta, field.ErrorList) {
	raw := u.Object["metadata"]
	if raw == nil {
		return &metav1.ObjectMeta{}, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, fmt.Sprintf("expected map[string]interface{}, got %T", raw))}
	}
	meta := &metav1.ObjectMeta{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, meta); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, err.Error())}
	}
	return meta, nil
}

// validateScale is the server's check of the scale subresource's replicas paths (the package
// that holds it also holds the server's etcd storage, which a client has no use for).
func (k *kind) validateScale(u *unstructured.Unstructured) field.ErrorList {
	if k.scale == nil {
		return nil
	}
	var errs field.ErrorList
	check := func(p string) {
		n, _, err := unstructured.NestedInt64(u.Object, strings.Split(strings.TrimPrefix(p, "."), ".")...)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(field.NewPath(p), n, err.Error()))
		case n < 0:
			errs = append(errs, field.Invalid(field.NewPath(p), n, "should be a non-negative integer"))
		case n > math.MaxInt32:
			errs = append(errs, field.Invalid(field.NewPath(p), n, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32)))
		}
	}
	check(k.scale.SpecReplicasPath)
	check(k.scale.StatusReplicasPath)
	return errs
}

// hasBlockingErr is the server's rule for skipping the CEL rules: after these errors their
// inputs may not have the shape the rules were compiled for.
func hasBlockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return false, nil
}

// Invalid is the error the API server answers a refused create with, e.g.
// `HiCacheDeployment.hicache.io "x" is invalid: spec.profile: Unsupported value: ...`.
func Invalid(gvk schema.GroupVersionKind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gvk.GroupKind(), name, errs)
}

// Message is the reasons of a refusal in the server's words: the part of its message after
// "is invalid: " (several reasons are listed in brackets, comma-separated).
func Message(errs field.ErrorList) string {
	if agg := errs.ToAggregate(); agg != nil {
		return agg.Error()
	}
	return ""
}
