package crdvalidation

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/randfill"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// roundTripIterations is how many random objects of each kind TestAPIRoundTrip checks.
const roundTripIterations = 300

// apiScheme holds every kind of the hicache.io API, lists included.
func apiScheme(tb testing.TB) *runtime.Scheme {
	tb.Helper()
	s := runtime.NewScheme()
	if err := hicachev1alpha1.AddToScheme(s); err != nil {
		tb.Fatal(err)
	}
	return s
}

// apiKinds is every kind of the group registered in s that a CRD of v serves, and their lists,
// in a fixed order.
func apiKinds(s *runtime.Scheme, v *Validator) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for gvk := range s.AllKnownTypes() {
		item := gvk
		item.Kind = strings.TrimSuffix(gvk.Kind, "List")
		if gvk.Group == hicachev1alpha1.GroupVersion.Group && v.Knows(item) {
			out = append(out, gvk)
		}
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.Kind, b.Kind) })
	return out
}

// filler fills objects the way Kubernetes fills its own in its API round-trip tests: the
// apimachinery fuzzer's functions for metadata, quantities and raw extensions; times and
// int-or-strings fill themselves. The metadata of an embedded object template holds what the
// API server lets it hold: labels and annotations.
func filler(s *runtime.Scheme, f *randfill.Filler) *randfill.Filler {
	return f.NilChance(.5).NumElements(0, 2).Funcs(metafuzzer.Funcs(serializer.NewCodecFactory(s))...).Funcs(
		func(j *corev1.PersistentVolumeClaimTemplate, c randfill.Continue) {
			c.Fill(&j.Labels)
			c.Fill(&j.Annotations)
			c.Fill(&j.Spec)
		},
	)
}

// TestAPIRoundTrip fills every kind of the API with random values and checks that nothing is
// lost on the ways an object travels: to JSON and back, to unstructured and back, and through
// the CRD's structural schema as the API server prunes a request, every value of the type the
// schema declares.
func TestAPIRoundTrip(t *testing.T) {
	s := apiScheme(t)
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	kinds := apiKinds(s, v)
	if len(kinds) != 8 {
		t.Fatalf("the scheme has %d kinds of %s: %v", len(kinds), hicachev1alpha1.GroupVersion.Group, kinds)
	}
	for _, gvk := range kinds {
		t.Run(gvk.Kind, func(t *testing.T) {
			f := filler(s, randfill.NewWithSeed(int64(len(gvk.Kind))))
			for range roundTripIterations {
				if problems := roundTrip(s, v, gvk, f); len(problems) > 0 {
					t.Fatalf("%s", strings.Join(problems, "\n"))
				}
			}
		})
	}
}

// FuzzAPIRoundTrip is TestAPIRoundTrip driven by the fuzzer's bytes: the first picks the kind,
// the rest are the random source of the filler.
func FuzzAPIRoundTrip(f *testing.F) {
	s := apiScheme(f)
	v, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	kinds := apiKinds(s, v)
	for i := range kinds {
		for seed := range uint64(4) {
			f.Add(append([]byte{byte(i)}, binary.LittleEndian.AppendUint64(nil, seed)...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		gvk := kinds[int(data[0])%len(kinds)]
		if problems := roundTrip(s, v, gvk, filler(s, randfill.NewFromGoFuzz(data[1:]))); len(problems) > 0 {
			t.Fatalf("%s", strings.Join(problems, "\n"))
		}
	})
}

// roundTrip fills one object of kind gvk and returns what it lost or changed on the way.
func roundTrip(s *runtime.Scheme, v *Validator, gvk schema.GroupVersionKind, f *randfill.Filler) []string {
	obj, err := s.New(gvk)
	if err != nil {
		return []string{err.Error()}
	}
	f.Fill(obj)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(gvk.Kind+": "+format, args...))
	}
	same := func(way string, got runtime.Object) {
		if !apiequality.Semantic.DeepEqual(obj, got) {
			fail("%s changed the object (-before +after):\n%s", way, cmp.Diff(obj, got))
		}
	}

	// Typed → JSON → typed, decoded strictly (a duplicate or unknown field is an error).
	b, err := json.Marshal(obj)
	if err != nil {
		fail("encoding to JSON: %v", err)
		return problems
	}
	fromJSON, err := decodeStrict(s, gvk, b)
	if err != nil {
		fail("decoding its own JSON: %v", err)
		return problems
	}
	same("typed → JSON → typed", fromJSON)

	// Typed → unstructured → typed, and the unstructured form is the JSON the server decodes.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		fail("converting to unstructured: %v", err)
		return problems
	}
	fromU, _ := s.New(gvk)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, fromU); err != nil {
		fail("converting from unstructured: %v", err)
		return problems
	}
	same("typed → unstructured → typed", fromU)
	decoded := map[string]any{}
	if err := utiljson.Unmarshal(b, &decoded); err != nil {
		fail("decoding JSON as the API server does: %v", err)
		return problems
	}
	if !apiequality.Semantic.DeepEqual(u, decoded) {
		fail("the unstructured form differs from the decoded JSON (-converted +decoded):\n%s", cmp.Diff(u, decoded))
	}

	// Through the CRD's structural schema: every object the kind's list holds, or the object.
	items := []map[string]any{decoded}
	if strings.HasSuffix(gvk.Kind, "List") {
		items = nil
		list, _ := decoded["items"].([]any)
		for _, it := range list {
			m, _ := it.(map[string]any)
			m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), strings.TrimSuffix(gvk.Kind, "List")
			items = append(items, m)
		}
	}
	for _, it := range items {
		problems = append(problems, throughSchema(s, v, it)...)
	}
	return problems
}

// throughSchema prunes obj as the API server prunes a request to create it, and reports every
// field pruned, every value whose type is not the one the schema declares, and any change to the
// typed object decoded from what is left.
func throughSchema(s *runtime.Scheme, v *Validator, obj map[string]any) []string {
	gvk := schema.FromAPIVersionAndKind(obj["apiVersion"].(string), obj["kind"].(string))
	k := v.kinds[gvk]
	if k == nil {
		return []string{fmt.Sprintf("no CustomResourceDefinition serves %s", gvk)}
	}
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(gvk.Kind+": "+format, args...))
	}
	before, err := json.Marshal(obj)
	if err != nil {
		return []string{err.Error()}
	}
	want, err := decodeStrict(s, gvk, before)
	if err != nil {
		return []string{err.Error()}
	}

	pruned := runtime.DeepCopyJSON(obj)
	if dropped := pruning.PruneWithOptions(pruned, k.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(dropped) > 0 {
		fail("the CRD's schema prunes %s: the API server would drop what the Go type holds", strings.Join(dropped, ", "))
	}
	// Nulls go, or become the default, as in the server's decoding; then any value of another
	// type than the schema's is a type error of the server's validator.
	typed := runtime.DeepCopyJSON(pruned)
	defaulting.PruneNonNullableNullsWithoutDefaults(typed, k.structural)
	defaulting.Default(typed, k.structural)
	for _, e := range apiservervalidation.ValidateCustomResource(nil, typed, k.validator) {
		if e.Type == field.ErrorTypeTypeInvalid {
			fail("the CRD's schema declares another type: %v", e)
		}
	}
	after, err := json.Marshal(pruned)
	if err != nil {
		return append(problems, err.Error())
	}
	got, err := decodeStrict(s, gvk, after)
	if err != nil {
		return append(problems, fmt.Sprintf("%s: decoding what the schema let through: %v", gvk.Kind, err))
	}
	if !apiequality.Semantic.DeepEqual(want, got) {
		fail("the object the server would store differs (-sent +stored):\n%s", cmp.Diff(want, got))
	}
	return problems
}

// decodeStrict decodes b into a new object of kind gvk with the case-sensitive, strict JSON
// decoding of the API machinery.
func decodeStrict(s *runtime.Scheme, gvk schema.GroupVersionKind, b []byte) (runtime.Object, error) {
	obj, err := s.New(gvk)
	if err != nil {
		return nil, err
	}
	strictErrs, err := kjson.UnmarshalStrict(b, obj)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("strict decoding: %v", strictErrs)
	}
	return obj, nil
}
