package hicachedeployment

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/config/crd"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The oracle's inputs. A fuzz input is either a pair written out, as JSON
//
//	{"sample": "hicachedeployment_qwen3.yaml", "old": {<merge patch of spec>}, "new": {<merge patch>}}
//
// (the new spec is the old one with its own patch on top), or any other bytes, which drive
// specGen: a sample picked by the bytes, a few random mutations for the old spec, then a few
// more for the new one. specGen walks the HiCacheDeploymentSpec type by reflection, so every
// field of the API can be reached (the pod template overrides, roles, router, storage, model
// source...), with values from the CRD schema's enums and from dictionaries of plausible values
// by field name; extra arguments come from the pinned release's argument table.

// oracleSample is a HiCacheDeployment sample of config/samples.
type oracleSample struct {
	file string
	hcd  *hicachev1alpha1.HiCacheDeployment
}

var oracleSamples = sync.OnceValues(func() ([]oracleSample, error) {
	dir := testutil.SamplesDir()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []oracleSample
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil || tm.Kind != "HiCacheDeployment" {
				continue
			}
			h := &hicachev1alpha1.HiCacheDeployment{}
			if err := yaml.UnmarshalStrict([]byte(doc), h); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			h.Namespace, h.UID, h.Generation = "default", types.UID(h.Name+"-uid"), 1
			out = append(out, oracleSample{file: filepath.Base(f), hcd: h})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no HiCacheDeployment sample in config/samples")
	}
	return out, nil
})

// oraclePair is the JSON form of a written-out pair.
type oraclePair struct {
	Sample string         `json:"sample"`
	Old    map[string]any `json:"old,omitempty"`
	New    map[string]any `json:"new,omitempty"`
}

// decodePair turns a fuzz input into two specs.
func decodePair(data []byte) (old, new *hicachev1alpha1.HiCacheDeployment, err error) {
	samples, err := oracleSamples()
	if err != nil {
		return nil, nil, err
	}
	var p oraclePair
	if len(data) > 0 && data[0] == '{' && json.Unmarshal(data, &p) == nil && p.Sample != "" {
		i := slices.IndexFunc(samples, func(s oracleSample) bool { return s.file == p.Sample })
		if i < 0 {
			return nil, nil, fmt.Errorf("no sample %q", p.Sample)
		}
		old, err = patchSpec(samples[i].hcd, p.Old)
		if err == nil {
			new, err = patchSpec(old, p.New)
		}
		return old, new, err
	}
	g := &specGen{data: data}
	base := samples[g.intn(len(samples))].hcd
	old = base.DeepCopy()
	for range g.intn(3) {
		g.mutateSpec(&old.Spec)
	}
	new = old.DeepCopy()
	for range 1 + g.intn(3) {
		g.mutateSpec(&new.Spec)
	}
	return old, new, nil
}

// patchSpec applies a JSON merge patch (RFC 7386) to a copy of h's spec.
func patchSpec(h *hicachev1alpha1.HiCacheDeployment, patch map[string]any) (*hicachev1alpha1.HiCacheDeployment, error) {
	out := h.DeepCopy()
	if len(patch) == 0 {
		return out, nil
	}
	b, err := json.Marshal(out.Spec)
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	mergePatch(spec, patch)
	b, err = json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	out.Spec = hicachev1alpha1.HiCacheDeploymentSpec{}
	if err := json.Unmarshal(b, &out.Spec); err != nil {
		return nil, err
	}
	return out, nil
}

func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			d, ok := dst[k].(map[string]any)
			if !ok {
				d = map[string]any{}
			}
			mergePatch(d, pv)
			dst[k] = d
		default:
			dst[k] = v
		}
	}
}

// specGen mutates a spec with choices read from its bytes (zeros once they run out).
type specGen struct {
	data []byte
	pos  int
}

func (g *specGen) byte() int {
	if g.pos >= len(g.data) {
		return 0
	}
	b := g.data[g.pos]
	g.pos++
	return int(b)
}

func (g *specGen) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return (g.byte()<<8 | g.byte()) % n
}

func (g *specGen) pick(list []string) string { return list[g.intn(len(list))] }

// Plausible values, by what a field is.
var (
	genImages = []string{
		"lmsysorg/sglang:v0.5.23", "lmsysorg/sglang:v0.5.23-cu129", "lmsysorg/sglang:v0.6.0",
		"lmsysorg/sglang:v0.5.23.post1", "registry.example/sglang@sha256:" + strings.Repeat("ab", 32),
	}
	// genUnknownEnvNames are names the release's table does not list: a user's own (two of them
	// referenced by genEnvValues), libraries' the operator cannot tell from a user's, and unlisted
	// names with SGLang's and Mooncake's reserved prefixes (refused by the product's rule).
	genUnknownEnvNames = []string{
		"OVR", "LAYOUT", "NCCL_DEBUG", "CUDA_LAUNCH_BLOCKING", "SGLANG_NOT_A_RELEASE_VARIABLE",
		"SGL_NOT_A_RELEASE_VARIABLE", "MC_NOT_A_RELEASE_VARIABLE", "MOONCAKE_NOT_A_RELEASE_VARIABLE",
	}
	genEnvValues = []string{
		"1", "0", "true", "fp8_e4m3", "bfloat16", "$(OVR)", "$$(OVR)", "a$(LAYOUT)", "/models/scales-a.json",
		"/models/scales-b.json", "$(OVR", "16",
	}
	genFieldPaths = []string{
		"metadata.labels['team']", "metadata.annotations['layout']", "status.podIP", "metadata.name",
		"metadata.labels['apps.kubernetes.io/pod-index']",
	}
	genMountPaths = []string{
		"/models", "/models/x", "/data", "/data/qwen3", "/root/.cache/huggingface", "/tmp/cache",
		"/opt/weights", "/sgl-workspace",
	}
	genVolumeNames = []string{"weights", "cache", "w2", "scratch"}
	genKeys        = []string{"team", "layout", "example.com/tier"}
	genValues      = []string{"a", "b", "fp8", "page_head"}
	genStrings     = []string{"", "a", "b", "x-1", "$(OVR)", "/data"}
	genInts        = []int64{0, 1, 2, 3, 4, 8, 16, 64, -1, 9000}
	genQuantities  = []string{"0", "16Mi", "1Gi", "4Gi", "16Gi", "100Gi", "2"}
	genByField     = map[string][]string{
		"image":         genImages,
		"mountPath":     genMountPaths,
		"claimName":     {"weights", "weights-v2", "qwen3-weights"},
		"repo":          {"Qwen/Qwen3-32B", "deepseek-ai/DeepSeek-V4", "Qwen/Qwen3-8B"},
		"revision":      {"", "main", "v1.0", "0123456789abcdef0123456789abcdef01234567"},
		"servedName":    {"", "qwen3-32b", "served-a", "served-b"},
		"modelPath":     {"", "org/draft-a", "org/draft-b", "deepseek-ai/DeepSeek-V4-DSpark"},
		"versionLine":   {"", "0.5", "0.5.23", "0.6", "0.6.0"},
		"subPath":       {"", "v1", "v2", "sub/dir"},
		"subPathExpr":   {"", "$(OVR)", "v1"},
		"ratio":         {"", "2", "1.5", "3"},
		"mambaSSMDType": {"", "float32", "bfloat16", "float16"},
		"fieldPath":     genFieldPaths,
		"workingDir":    {"", "/models", "/tmp"},
		"queue":         {"", "q1", "q2"},
		"key":           {"token", "scales", "team"},
		"namespace":     {"team-a", "team-b"},
	}
)

// oracleCRDSchema is the spec's schema in the committed CRD, for enums.
var oracleCRDSchema = sync.OnceValues(func() (*apiextensionsv1.JSONSchemaProps, error) {
	b, err := crd.Bases.ReadFile("bases/hicache.io_hicachedeployments.yaml")
	if err != nil {
		return nil, err
	}
	var c apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	return &spec, nil
})

// extraArgFlags are the release's arguments the generator writes, and those of them that change
// the layout or the keys (picked as often as all the others together).
var extraArgFlags = sync.OnceValues(func() ([2][]argspec.Argument, error) {
	spec, err := argspec.Default()
	if err != nil {
		return [2][]argspec.Argument{}, err
	}
	rules, err := sglang.ArgRules()
	if err != nil {
		return [2][]argspec.Argument{}, err
	}
	var all, strong []argspec.Argument
	for _, a := range spec.Arguments() {
		all = append(all, a)
		if c := rules[a.Flags[0]].Class; c == sglang.ArgLayout || c == sglang.ArgKeys {
			strong = append(strong, a)
		}
	}
	return [2][]argspec.Argument{all, strong}, nil
})

// envNamesByClass are the variables of internal/sglang/env_vars.txt, by class, each list sorted.
var envNamesByClass = sync.OnceValues(func() (map[sglang.ArgClass][]string, error) {
	rules, err := sglang.EnvRules()
	if err != nil {
		return nil, err
	}
	out := map[sglang.ArgClass][]string{}
	for name, r := range rules {
		out[r.Class] = append(out[r.Class], name)
	}
	for c := range out {
		slices.Sort(out[c])
	}
	return out, nil
})

// genEnvClasses are the classes envName draws from, the last one a name the table does not list.
var genEnvClasses = []sglang.ArgClass{sglang.ArgNeutral, sglang.ArgKeys, sglang.ArgLayout, sglang.ArgRefused, ""}

// envName is a variable name: one of each class of the release's table (neutral, keys, layout,
// refused) or one the table does not list, about equally often, with the unknown user names the
// generated values reference ($(OVR), $(LAYOUT)) among the last.
func (g *specGen) envName() string {
	byClass, err := envNamesByClass()
	class := genEnvClasses[g.intn(len(genEnvClasses))]
	if err != nil || class == "" || len(byClass[class]) == 0 {
		return g.pick(genUnknownEnvNames)
	}
	return g.pick(byClass[class])
}

// envValue is a plausible value of a variable: the release's default for it now and then (which
// the product and the oracle both count as unset), else one of genEnvValues.
func (g *specGen) envValue(name string) string {
	if d, ok := sglang.EnvDefault(name); ok && g.intn(4) == 0 {
		return d
	}
	return g.pick(genEnvValues)
}

// mutateSpec makes one change: to the extra arguments, the environment, the image, or any field
// reached by a walk of the spec's type.
func (g *specGen) mutateSpec(spec *hicachev1alpha1.HiCacheDeploymentSpec) {
	switch g.intn(8) {
	case 0, 1:
		spec.Template.ExtraArgs = g.mutateExtraArgs(spec.Template.ExtraArgs)
	case 2:
		g.mutateEnv(&spec.Template.Env)
	case 3:
		// An image of a release the operator has no arguments of, or one it cannot read a
		// release from, runs only when the spec names the checked release it is equivalent to:
		// the generator says so, so that such a change is judged, not refused.
		spec.SGLang.Image = g.pick(genImages)
		spec.SGLang.CompatibleRelease = ""
		if !strings.HasPrefix(spec.SGLang.Image, "lmsysorg/sglang:v0.5.23") || strings.Contains(spec.SGLang.Image, ".post") {
			spec.SGLang.CompatibleRelease = "0.5.23"
		}
	default:
		sch, _ := oracleCRDSchema()
		g.walk(reflect.ValueOf(spec).Elem(), sch, "spec", 0)
	}
}

// mutateExtraArgs adds a flag with a plausible value, drops one or starts over.
func (g *specGen) mutateExtraArgs(args []string) []string {
	flags, err := extraArgFlags()
	if err != nil {
		return args
	}
	switch op := g.intn(10); {
	case op == 9:
		return nil
	case op == 8 && len(args) > 0:
		return slices.Delete(slices.Clone(args), len(args)-1, len(args))
	}
	list := flags[0]
	if g.intn(2) == 0 {
		list = flags[1]
	}
	a := list[g.intn(len(list))]
	flag := a.Flags[g.intn(len(a.Flags))]
	out := append(slices.Clone(args), flag)
	if !a.Nargs.TakesValue() {
		return out
	}
	for range max(a.Nargs.Min, 1) {
		out = append(out, g.argValue(a))
	}
	return out
}

// argValue is a plausible value of an argument: one of its choices, its default, or one of its
// type.
func (g *specGen) argValue(a argspec.Argument) string {
	if len(a.Choices) > 0 && g.intn(5) > 0 {
		return g.pick(a.Choices)
	}
	if d, ok := argDefaultText(a); ok && g.intn(4) == 0 {
		return d
	}
	switch a.Type {
	case "int":
		return g.pick([]string{"1", "2", "4", "8", "64", "4096"})
	case "float":
		return g.pick([]string{"0.5", "0.8", "0.9", "1.5"})
	case "json", "json_list":
		return g.pick([]string{`{}`, `{"a":1}`, `[]`})
	}
	return g.pick([]string{"auto", "$(OVR)", "/models/x", "a", "bfloat16", "1"})
}

// mutateEnv adds, changes or drops a variable of spec.template.env.
func (g *specGen) mutateEnv(env *[]corev1.EnvVar) {
	switch op := g.intn(10); {
	case op < 6:
		name := g.envName()
		*env = append(*env, corev1.EnvVar{Name: name, Value: g.envValue(name)})
	case op < 7:
		e := corev1.EnvVar{Name: g.envName()}
		e.ValueFrom = &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: g.pick(genFieldPaths)}}
		*env = append(*env, e)
	case op < 9 && len(*env) > 0:
		i := g.intn(len(*env))
		(*env)[i].Value, (*env)[i].ValueFrom = g.envValue((*env)[i].Name), nil
	case len(*env) > 0:
		*env = slices.Delete(slices.Clone(*env), len(*env)-1, len(*env))
	}
}

var (
	quantityType = reflect.TypeFor[resource.Quantity]()
	intOrStrType = reflect.TypeFor[intstr.IntOrString]()
)

// walk changes one field at or below v, whose schema is sch (nil when unknown) and whose JSON
// path is path.
func (g *specGen) walk(v reflect.Value, sch *apiextensionsv1.JSONSchemaProps, path string, depth int) {
	if depth > 12 {
		return
	}
	field := path[strings.LastIndex(path, ".")+1:]
	switch {
	case v.Type() == quantityType:
		v.Set(reflect.ValueOf(resource.MustParse(g.pick(genQuantities))))
		return
	case v.Type() == intOrStrType:
		if g.intn(2) == 0 {
			v.Set(reflect.ValueOf(intstr.FromInt32(int32(genInts[g.intn(len(genInts))]))))
		} else {
			v.Set(reflect.ValueOf(intstr.FromString(g.pick([]string{"http", "25%", "1"}))))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else if g.intn(6) == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		g.walk(v.Elem(), sch, path, depth+1)
	case reflect.Struct:
		var fields []int
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() && jsonName(f) != "-" {
				fields = append(fields, i)
			}
		}
		if len(fields) == 0 {
			return
		}
		i := fields[g.intn(len(fields))]
		f := v.Type().Field(i)
		name := jsonName(f)
		if f.Anonymous && name == "" {
			g.walk(v.Field(i), sch, path, depth+1)
			return
		}
		g.walk(v.Field(i), childSchema(sch, name), path+"."+name, depth+1)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(g.pick(genStrings)))
			return
		}
		items := itemsSchema(sch)
		switch op := g.intn(10); {
		case op < 4 || v.Len() == 0:
			e := reflect.New(v.Type().Elem()).Elem()
			g.walk(e, items, path, depth+1)
			v.Set(reflect.Append(v, e))
		case op < 8:
			g.walk(v.Index(g.intn(v.Len())), items, path, depth+1)
		case op < 9:
			v.Set(v.Slice(0, v.Len()-1))
		default:
			v.Set(reflect.Zero(v.Type()))
		}
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		if v.Type().Key().Kind() != reflect.String {
			return
		}
		keys := v.MapKeys()
		if len(keys) > 0 && g.intn(4) == 0 {
			v.SetMapIndex(keys[g.intn(len(keys))], reflect.Value{})
			return
		}
		k := reflect.New(v.Type().Key()).Elem()
		k.SetString(g.pick(genKeys))
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.String {
			e.SetString(g.pick(genValues))
		} else {
			g.walk(e, additionalSchema(sch), path+".*", depth+1)
		}
		v.SetMapIndex(k, e)
	case reflect.String:
		if enum := schemaEnum(sch); len(enum) > 0 && g.intn(5) > 0 {
			v.SetString(g.pick(enum))
			return
		}
		if list, ok := genByField[field]; ok {
			v.SetString(g.pick(list))
			return
		}
		switch {
		case field == "name" && (strings.Contains(path, "olumes") || strings.Contains(path, "olumeMounts")):
			v.SetString(g.pick(genVolumeNames))
		case field == "name" && strings.Contains(path, ".env"):
			v.SetString(g.envName())
		case field == "value" && strings.Contains(path, ".env"):
			v.SetString(g.pick(genEnvValues))
		case field == "name" && strings.Contains(path, "backendRef"):
			v.SetString(g.pick([]string{"mooncake", "mooncake-external"}))
		case field == "name" && strings.Contains(path, "ontainers"):
			v.SetString(g.pick([]string{"fetch", "side", "warm"}))
		case field == "path" && strings.Contains(path, "model"):
			v.SetString(g.pick([]string{"Qwen/Qwen3-32B", "/data/qwen3", "/models/qwen3", "deepseek-ai/DeepSeek-V4"}))
		case field == "path":
			v.SetString(g.pick([]string{"/data", "/data/qwen3", "/mnt/weights"}))
		case field == "command" || field == "args":
			v.SetString(g.pick([]string{"sh", "-c", "cp -r /src/. /models", "$(OVR)"}))
		default:
			v.SetString(g.pick(genStrings))
		}
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(genInts[g.intn(len(genInts))])
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(max(genInts[g.intn(len(genInts))], 0)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(genInts[g.intn(len(genInts))]) / 2)
	}
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if tag == "" {
		return f.Name
	}
	return name
}

func childSchema(s *apiextensionsv1.JSONSchemaProps, name string) *apiextensionsv1.JSONSchemaProps {
	if s == nil {
		return nil
	}
	if c, ok := s.Properties[name]; ok {
		return &c
	}
	return nil
}

func itemsSchema(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s == nil || s.Items == nil {
		return nil
	}
	return s.Items.Schema
}

func additionalSchema(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s == nil || s.AdditionalProperties == nil {
		return nil
	}
	return s.AdditionalProperties.Schema
}

func schemaEnum(s *apiextensionsv1.JSONSchemaProps) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range s.Enum {
		var v string
		if json.Unmarshal(e.Raw, &v) == nil {
			out = append(out, v)
		}
	}
	return out
}
