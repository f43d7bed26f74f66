// Package resolve turns a HiCacheDeployment into what the operator decides from it: the resolved
// cache topology, the per-rank L3 plan, the layout facts and namespace, and the shape of a serving
// group. It is pure (no API calls), so the controller and the kubectl plugin share it and a plan
// can be shown before anything runs.
package resolve

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// Resolved is everything decided from one HiCacheDeployment spec.
type Resolved struct {
	// Topology is the cache topology, the profile filled in.
	Topology cache.Topology
	// Settings are the server settings that matter to the cache.
	Settings cache.Settings
	// SGLang is the release read from the image and the arguments it is checked against.
	SGLang SGLangRuntime
	// Plan is the per-rank L3 duty plan of one serving group.
	Plan cache.RankPlan
	// Facts are the layout facts; Fingerprint and ShortHash their hashes.
	Facts       cache.LayoutFacts
	Fingerprint string
	ShortHash   string
	// Namespace is the L3 key prefix (extra_backend_tag) this spec writes under.
	Namespace string
	// GPUs is the number of GPUs one serving group uses; Nodes the pods it spans and
	// GPUsPerPod what each pod requests.
	GPUs, Nodes, GPUsPerPod int
	// Replicas is the number of serving groups.
	Replicas int
	// SegmentPerRank is the memory in bytes each rank lends to the L3 store
	// (spec.storage.globalSegmentSize; 0 without storage or for a pure client), and
	// GlobalSegmentSize the global_segment_size rendered for SGLang, which divides it by the
	// attention-TP size × the PP size and mounts the share on each rank.
	SegmentPerRank, GlobalSegmentSize int64
	// Reasons say why each layout fact set by an environment variable is one, by fact name.
	Reasons map[string]string
}

// SegmentPerPod is the memory the ranks of one pod lend to the store together.
func (r *Resolved) SegmentPerPod() int64 { return r.SegmentPerRank * int64(r.GPUsPerPod) }

// SegmentPerGroup is the memory all ranks of one serving group lend to the store together.
func (r *Resolved) SegmentPerGroup() int64 { return r.SegmentPerRank * int64(r.GPUs) }

// FieldError is a spec problem, named by its field.
type FieldError struct {
	Field   string
	Message string
	// plain messages name their fields themselves.
	plain bool
}

func (e *FieldError) Error() string {
	if e.plain {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// UnknownProfileError is a profile the operator does not know.
type UnknownProfileError struct{ Name string }

func (e *UnknownProfileError) Error() string {
	return fmt.Sprintf("spec.profile: unknown profile %q; known profiles: %s", e.Name, strings.Join(cache.ProfileNames(), ", "))
}

// ErrHasRoles is the error of Resolve for a deployment with spec.roles, whose serving groups
// are decided role by role (RolesOf): no one group shape, plan or command line is the whole
// deployment's.
var ErrHasRoles = &FieldError{Field: "spec.roles", Message: "is set: the deployment's prefill and decode roles each have their own group shape, rank plan and command line"}

// Resolve decides the topology, plan, layout and group shape of a HiCacheDeployment without
// roles (RolesOf decides those of one with spec.roles).
func Resolve(hcd *hicachev1alpha1.HiCacheDeployment) (*Resolved, error) {
	if hcd.Spec.Roles != nil {
		return nil, ErrHasRoles
	}
	return resolveOne(hcd, true)
}

// resolveOne is Resolve of a deployment as one kind of server sees it (spec.roles ignored).
// With sglangRules, it also refuses what the pinned SGLang's own argument checks refuse
// (serverargs.go).
func resolveOne(hcd *hicachev1alpha1.HiCacheDeployment, sglangRules bool) (*Resolved, error) {
	spec := &hcd.Spec
	if err := checkNames(hcd); err != nil {
		return nil, err
	}
	if err := checkPodOverrides(&spec.Template); err != nil {
		return nil, err
	}
	if err := checkVarRefs(spec); err != nil {
		return nil, err
	}
	if spec.Profile != "" {
		if _, ok := cache.LookupProfile(string(spec.Profile)); !ok {
			return nil, &UnknownProfileError{Name: string(spec.Profile)}
		}
	}
	topo, err := cache.ResolveTopology(string(spec.Profile), explicitTopology(spec))
	if err != nil {
		return nil, topologyError(err)
	}
	plan, err := cache.Plan(topo)
	if err != nil {
		return nil, topologyError(err)
	}
	if spec.Storage != nil && spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed {
		if err := checkFixedNamespace(spec.Storage.Namespace); err != nil {
			return nil, err
		}
	}
	if _, err := Model(spec); err != nil {
		return nil, err
	}
	if err := checkDraftRevision(spec); err != nil {
		return nil, err
	}
	settings, env, err := settingsAndEnv(spec)
	if err != nil {
		return nil, err
	}
	rt, err := SGLang(spec)
	if err != nil {
		return nil, err
	}
	facts := cache.Facts(topo, settings)
	r := &Resolved{
		Topology:    topo,
		Settings:    settings,
		SGLang:      rt,
		Plan:        plan,
		Facts:       facts,
		Fingerprint: facts.Fingerprint(),
		ShortHash:   facts.ShortFingerprint(),
		Namespace:   cache.Namespace(facts),
		Replicas:    1,
		Reasons:     envReasons(env),
	}
	if spec.Storage != nil && spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed {
		r.Namespace = spec.Storage.Namespace
	}
	r.Replicas = int(ptr.Deref(spec.Replicas, hicachev1alpha1.DefaultReplicas))
	if err := r.shape(spec.Topology); err != nil {
		return nil, err
	}
	if err := r.segment(spec.Storage); err != nil {
		return nil, err
	}
	if sglangRules {
		if err := checkServerArgs(spec, r, "", ""); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkFixedNamespace refuses a Fixed namespace that is missing or looks like one the operator
// derives from a layout: a Fixed deployment writing under another deployment's hc-<hash> name
// would put its keys in that namespace under another layout.
func checkFixedNamespace(ns string) error {
	if ns == "" {
		return &FieldError{Field: "spec.storage.namespace", Message: "is required with the Fixed namespace strategy: without it every deployment on the store would share bare keys"}
	}
	if strings.HasPrefix(ns, cache.NamespacePrefixTag) {
		return &FieldError{Field: "spec.storage.namespace", Message: fmt.Sprintf(
			"%q starts with %s, which is reserved for the namespaces the operator derives from layouts (namespaceStrategy LayoutHash); choose a name without that prefix", ns, cache.NamespacePrefixTag)}
	}
	return nil
}

// segment decides the memory each rank lends to the store and the global_segment_size that
// makes SGLang mount it.
func (r *Resolved) segment(st *hicachev1alpha1.StorageSpec) error {
	if st == nil || st.GlobalSegmentSize == nil {
		return nil
	}
	const field = "spec.storage.globalSegmentSize"
	per := st.GlobalSegmentSize.Value()
	switch {
	case per < 0:
		return &FieldError{Field: field, Message: fmt.Sprintf("%s is negative; use 0 for ranks that lend no memory (a backend with store pods) or the memory each rank lends", st.GlobalSegmentSize)}
	case per > 0 && per < sglang.MinSegmentPerRank:
		return &FieldError{Field: field, Message: fmt.Sprintf("%s is less than the 16Mi Mooncake mounts at least: each rank's setup would fail; use 0 (lend nothing) or at least 16Mi per rank", st.GlobalSegmentSize)}
	}
	global, err := sglang.GlobalSegmentSize(per, r.Plan.AttentionTP, r.Plan.PipelineParallel)
	if err != nil {
		return &FieldError{Field: field, Message: fmt.Sprintf("%s per rank is too large: %v", st.GlobalSegmentSize, err)}
	}
	r.SegmentPerRank, r.GlobalSegmentSize = per, global
	return nil
}

// MaxNameLength bounds a HiCacheDeployment's name: it names Services (DNS labels) and the
// StatefulSet of each group, whose pods carry a controller-revision-hash label of the
// StatefulSet's name plus 11 characters (at most 63).
const MaxNameLength = 40

// MaxRolesNameLength bounds the name of a deployment with spec.roles, whose groups' names are
// longer: "<name>-prefill-<g>" with up to four digits, plus the 11 characters of the pods'
// controller-revision-hash, make at most 63.
const MaxRolesNameLength = 39

// ReservedEnv are the container variables the operator sets itself, besides every MOONCAKE_*
// and OperatorEnvPrefix variable.
var ReservedEnv = []string{"POD_IP", "NODE_RANK", AdminAPIKeyEnv, APIKeyEnv, ServerAdminKeyEnv, ServerAPIKeyEnv}

// OperatorEnvPrefix is the prefix of the operator's own variables (the keys among them): all
// of it is reserved, so that a variable the operator adds later is never one a user set.
const OperatorEnvPrefix = "HICACHE_"

// reservedEnv tells whether a user may not set the variable name.
func reservedEnv(name string) bool {
	return slices.Contains(ReservedEnv, name) || strings.HasPrefix(name, "MOONCAKE_") || strings.HasPrefix(name, OperatorEnvPrefix)
}

// checkNames refuses names the API server would refuse only in the middle of applying children,
// and user variables that clash with the operator's.
func checkNames(hcd *hicachev1alpha1.HiCacheDeployment) error {
	if n := hcd.Name; n != "" && (len(n) > MaxNameLength || !dnsLabel.MatchString(n)) {
		return &FieldError{Field: "metadata.name", Message: fmt.Sprintf(
			"%q must be a DNS label (lowercase letters, digits and '-', starting with a letter) of at most %d characters: it names the Services, StatefulSets and pods of the serving groups", n, MaxNameLength)}
	}
	for k := range hcd.Spec.Template.Labels {
		if strings.HasPrefix(k, hicachev1alpha1.LabelPrefix) || strings.HasPrefix(k, "apps.kubernetes.io/") {
			return &FieldError{Field: "spec.template.labels", Message: fmt.Sprintf(
				"%q is a label the operator sets on rank pods (hicache.io/ and apps.kubernetes.io/ are reserved); choose another key", k)}
		}
	}
	for i, e := range hcd.Spec.Template.Env {
		if reservedEnv(e.Name) {
			return &FieldError{Field: fmt.Sprintf("spec.template.env[%d]", i), Message: fmt.Sprintf(
				"%s is set by the operator (POD_IP, NODE_RANK and MOONCAKE_* come from the topology and the CacheBackend, HICACHE_* are the operator's own, the keys among them from spec.security); remove it", e.Name)}
		}
	}
	return nil
}

var dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// shape computes the GPUs and pods of one serving group.
func (r *Resolved) shape(t hicachev1alpha1.TopologySpec) error {
	tp, pp, dp := max(int(t.TensorParallel), 1), max(int(t.PipelineParallel), 1), max(int(t.DataParallel), 1)
	perNode := int(t.GPUsPerNode)
	if perNode <= 0 {
		perNode = 8
	}
	gpus := tp * pp
	if !t.DPAttention {
		gpus *= dp
	}
	r.GPUs = gpus
	if gpus <= perNode {
		r.Nodes, r.GPUsPerPod = 1, gpus
		return nil
	}
	if gpus%perNode != 0 {
		product := fmt.Sprintf("tensorParallel %d x pipelineParallel %d x dataParallel %d", tp, pp, dp)
		if t.DPAttention {
			product = fmt.Sprintf("tensorParallel %d x pipelineParallel %d; attention data parallelism splits them", tp, pp)
		}
		return &FieldError{Field: "spec.topology", Message: fmt.Sprintf(
			"a serving group needs %d GPUs (%s), which is not a whole number of %d-GPU nodes", gpus, product, perNode)}
	}
	r.Nodes, r.GPUsPerPod = gpus/perNode, perNode
	return nil
}

// topologyError names the API's fields in an error of the cache model, whose field names are
// its own (topology.draft.hostPoolKind is spec.topology.draft.hostPool, ...).
func topologyError(err error) error {
	msg := strings.NewReplacer(
		"set topology.draft.placement (and packedLayers or hostPoolKind and pools) explicitly",
		"set spec.topology.draft.packedLayers explicitly (above 0: packed into the target's pools; 0: a sidecar draft, with spec.topology.draft.hostPool)",
		"must be empty unless topology.draft.placement is Sidecar", "must be empty unless the draft is a sidecar (spec.topology.draft.packedLayers: 0)",
		"topology.draft.hostPoolKind", "spec.topology.draft.hostPool",
		"topology.draft.placement", "spec.topology.draft.packedLayers",
		"Packed for", "packed layers for",
		"is a Sidecar draft", "is a sidecar draft (spec.topology.draft.packedLayers: 0)",
		"topology.", "spec.topology.",
		"topology has", "spec.topology has",
	).Replace(err.Error())
	return &FieldError{Field: "spec.topology", Message: msg, plain: true}
}

// explicitTopology is the part of the topology the spec sets; ResolveTopology fills the rest
// from the profile.
func explicitTopology(spec *hicachev1alpha1.HiCacheDeploymentSpec) cache.Topology {
	t := spec.Topology
	out := cache.Topology{
		Attention:        cache.AttentionKind(t.Attention),
		TensorParallel:   int(t.TensorParallel),
		PipelineParallel: int(t.PipelineParallel),
		DataParallel:     int(t.DataParallel),
		DPAttention:      t.DPAttention,
	}
	for _, p := range t.Pools {
		out.Pools = append(out.Pools, cache.PoolName(p))
	}
	// The only L3 store the API offers is Mooncake. A deployment without storage is still
	// planned against it, so its plan shows what each rank would write once a store is added;
	// the controller reports that nothing is written meanwhile.
	out.Backend = cache.BackendMooncake
	if d := t.Draft; d != nil {
		out.Draft = cache.Draft{
			Algorithm:    cache.DraftAlgorithm(d.Algorithm),
			ModelPath:    d.ModelPath,
			Revision:     d.Revision,
			HostPoolKind: cache.HostPoolKind(d.HostPool),
		}
		if d.PackedLayers != nil {
			out.Draft.PackedLayers = int(*d.PackedLayers)
			if *d.PackedLayers > 0 {
				out.Draft.Placement = cache.DraftPlacementPacked
			} else {
				out.Draft.Placement = cache.DraftPlacementSidecar
				// The API has no field for a sidecar draft's pools: it keeps its own KV pool,
				// shaped like the profile says when the profile knows it as a sidecar.
				if lay, ok := profileDraft(spec, d.Algorithm); !ok || lay.Placement != cache.DraftPlacementSidecar {
					out.Draft.Pools = []cache.PoolName{cache.PoolDraft}
					if out.Draft.HostPoolKind == "" {
						out.Draft.HostPoolKind = cache.HostPoolMHA
					}
				}
			}
		}
	}
	return out
}

// profileDraft is the profile's layout of a draft algorithm, if the spec names a profile that
// knows it.
func profileDraft(spec *hicachev1alpha1.HiCacheDeploymentSpec, alg hicachev1alpha1.DraftAlgorithm) (cache.DraftLayout, bool) {
	p, ok := cache.LookupProfile(string(spec.Profile))
	if !ok {
		return cache.DraftLayout{}, false
	}
	lay, ok := p.Drafts[cache.DraftAlgorithm(alg)]
	return lay, ok
}

// maxPageSize is the schema's bound on spec.hicache.pageSize.
const maxPageSize = 4096

// Settings are the cache-relevant server settings of a spec.
func Settings(spec *hicachev1alpha1.HiCacheDeploymentSpec) (cache.Settings, error) {
	s, _, err := settingsAndEnv(spec)
	return s, err
}

// settingsAndEnv is Settings with the classified env of the serving container, whose reasons
// the resolved deployment keeps.
func settingsAndEnv(spec *hicachev1alpha1.HiCacheDeploymentSpec) (cache.Settings, Env, error) {
	var env Env
	h := spec.HiCache
	// The model's identity, not where it is mounted: a hub source is its repository.
	model, _ := placeModel(spec)
	s := cache.Settings{
		ModelPath:       model.Identity,
		Revision:        spec.Model.Revision,
		ServedModelName: ServedModelName(spec),
		KVCacheDType:    string(h.KVCacheDType),
		HostMemLayout:   string(h.MemLayout),
		MambaSSMDType:   h.MambaSSMDType,
		Quantization:    string(spec.Model.Quantization),
		PageSize:        int(h.PageSize),
		HostMemoryMode:  string(h.HostMemoryMode),
		HiCacheSizeGB:   float64(h.SizeGB),
		WritePolicy:     string(h.WritePolicy),
		PrefetchPolicy:  string(h.PrefetchPolicy),
		IOBackend:       string(h.IOBackend),
	}
	rt, err := SGLang(spec)
	if err != nil {
		return s, env, err
	}
	s.SGLangVersion, s.SGLangImage = rt.Fact, rt.ImageDigest
	// The CRD's schema bounds the page size; a spec read from a file (kubectl hicache plan -f)
	// has not been through it.
	if h.PageSize < 0 || h.PageSize > maxPageSize {
		return s, env, &FieldError{Field: "spec.hicache.pageSize", Message: fmt.Sprintf("%d is not a page size: write 1 to %d tokens, or leave it out for the release's default", h.PageSize, maxPageSize)}
	}
	if d := spec.Topology.Draft; d != nil {
		s.DraftKVCacheDType = string(d.KVCacheDType)
		s.DraftNumSteps, s.DraftNumDraftTokens, s.DraftDSparkBlockSize = int(d.NumSteps), int(d.NumDraftTokens), int(d.DSparkBlockSize)
	}
	extra, err := sglang.ClassifyExtraArgsFor(rt.ArgsRelease, spec.Template.ExtraArgs)
	if err != nil {
		return s, env, &FieldError{Field: "spec.template.extraArgs", Message: strings.ReplaceAll(err.Error(), "\n", "; "), plain: true}
	}
	s.ExtraLayoutArgs, s.ExtraKeyArgs = extra.Layout, extra.Keys
	env, err = ClassifyEnv("spec.template.env", spec.Template.Env)
	if err != nil {
		return s, env, err
	}
	s.LayoutEnv, s.KeyEnv = env.Layout, env.Keys
	if s.LayoutMounts, err = podMounts(spec, rt.ArgsRelease); err != nil {
		return s, env, err
	}
	if h.Ratio != "" {
		ratio, err := strconv.ParseFloat(h.Ratio, 64)
		if err != nil || math.IsNaN(ratio) || math.IsInf(ratio, 0) || ratio <= 1 {
			return s, env, &FieldError{Field: "spec.hicache.ratio", Message: fmt.Sprintf("%q is not a number greater than 1", h.Ratio)}
		}
		s.HiCacheRatio = ratio
	}
	return s, env, nil
}

// ServedModelName is the name the model is served under: spec.model.servedName, else its path,
// else the repository of its hub source.
func ServedModelName(spec *hicachev1alpha1.HiCacheDeploymentSpec) string {
	m := spec.Model
	switch {
	case m.ServedName != "":
		return m.ServedName
	case m.Path != "":
		return m.Path
	case m.Source != nil && m.Source.Hub != nil:
		return m.Source.Hub.Repo
	}
	return ""
}

// Config is what the change classifier compares.
func (r *Resolved) Config(hcd *hicachev1alpha1.HiCacheDeployment) cache.Config {
	other := map[string]string{}
	if hcd.Spec.SGLang.Image != "" {
		other["image"] = hcd.Spec.SGLang.Image
	}
	if hcd.Spec.Resources.Requests != nil || hcd.Spec.Resources.Limits != nil {
		other["resources"] = hcd.Spec.Resources.String()
	}
	// Extra arguments that change the layout or the keys are in the settings; the rest are
	// neutral, one entry per flag. Each is described against the release's default.
	defaults := map[string]string{}
	if extra, err := sglang.ClassifyExtraArgs(hcd.Spec.Template.ExtraArgs); err == nil {
		for flag, v := range extra.Neutral {
			other["extra arg "+flag] = v
		}
		for _, m := range []map[string]string{extra.Layout, extra.Keys, extra.Neutral} {
			for flag := range m {
				if d, ok := sglang.ArgDefault(flag); ok {
					defaults[cache.FactExtraArgPrefix+flag] = d
					defaults["extraArgs."+flag] = d
					defaults["other.extra arg "+flag] = d
				}
			}
		}
	}
	// Where the weights come from is a layout fact through the model's identity only; how they
	// get there (the token, the download volume) and the probes are neutral.
	if src := hcd.Spec.Model.Source; src != nil {
		b, _ := json.Marshal(src)
		other["model source"] = string(b)
	}
	if hcd.Spec.Probes != (hicachev1alpha1.ProbesSpec{}) || hcd.Spec.Model.WeightsSize != nil {
		b, _ := json.Marshal(struct {
			Probes      hicachev1alpha1.ProbesSpec `json:"probes"`
			WeightsSize any                        `json:"weightsSize,omitempty"`
		}{hcd.Spec.Probes, hcd.Spec.Model.WeightsSize})
		other["probes"] = string(b)
	}
	// Variables that change the layout or the keys are in the settings; the neutral ones are
	// compared one by one (a reference by what it names).
	for _, e := range hcd.Spec.Template.Env {
		if d, ok := sglang.EnvDefault(e.Name); ok {
			defaults[cache.FactEnvPrefix+e.Name] = d
		}
		if rule, err := sglang.EnvRuleOf(e.Name); err != nil || rule.Class != sglang.ArgNeutral {
			continue
		}
		v := e.Value
		if e.ValueFrom != nil {
			b, _ := json.Marshal(e.ValueFrom)
			v = "valueFrom " + string(b)
		}
		other["env "+e.Name] = v
	}
	// The rest of the pod template changes no layout fact.
	t := hcd.Spec.Template
	t.ExtraArgs = nil
	t.Env = nil
	if len(t.Labels) > 0 || len(t.Annotations) > 0 ||
		len(t.NodeSelector) > 0 || len(t.Tolerations) > 0 || t.ServiceAccountName != "" {
		b, _ := json.Marshal(t)
		other["template"] = string(b)
	}
	return cache.Config{Topology: r.Topology, Settings: r.Settings, Replicas: r.Replicas, Other: other, Defaults: defaults, Reasons: r.Reasons}
}

// DraftSummary is the draft in a few words, e.g. "DSPARK (packed, 3 layers)".
func (r *Resolved) DraftSummary() string {
	d := r.Topology.Draft
	if !d.Enabled() {
		return "none"
	}
	switch d.Placement {
	case cache.DraftPlacementPacked:
		if d.PackedLayers == 1 {
			return fmt.Sprintf("%s (packed, 1 layer)", d.Algorithm)
		}
		return fmt.Sprintf("%s (packed, %d layers)", d.Algorithm, d.PackedLayers)
	case cache.DraftPlacementSidecar:
		return fmt.Sprintf("%s (sidecar, %s pool)", d.Algorithm, d.HostPoolKind)
	default:
		return string(d.Algorithm)
	}
}

// Writers is the number of ranks of one group with at least one L3 write duty.
func (r *Resolved) Writers() int { return r.Plan.Writers() }

// ConfigMapName is the ConfigMap in which the operator keeps a deployment's rendered extra
// config and rank plan (kubectl hicache status reads it).
func ConfigMapName(hcd string) string { return hcd + "-hicache" }

// FactList is the layout facts as sorted "name=value" strings.
func (r *Resolved) FactList() []string {
	lines := strings.Split(strings.TrimSpace(r.Facts.Canonical()), "\n")
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if strings.Contains(l, "=") {
			out = append(out, l)
		}
	}
	return out
}
