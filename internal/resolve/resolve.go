// Package resolve turns a HiCacheDeployment into what the operator decides from it: the resolved
// cache topology, the per-rank L3 plan, the layout facts and namespace, and the shape of a serving
// group. It is pure (no API calls), so the controller and the kubectl plugin share it and a plan
// can be shown before anything runs.
package resolve

import (
	"fmt"
	"strconv"
	"strings"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
)

// DefaultSGLangVersion is the SGLang release assumed when a deployment names no version line.
// It matches the release whose argument definitions the renderer is checked against.
const DefaultSGLangVersion = "0.5"

// Resolved is everything decided from one HiCacheDeployment spec.
type Resolved struct {
	// Topology is the cache topology, the profile filled in.
	Topology cache.Topology
	// Settings are the server settings that matter to the cache.
	Settings cache.Settings
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
}

// FieldError is a spec problem, named by its field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// UnknownProfileError is a profile the operator does not know.
type UnknownProfileError struct{ Name string }

func (e *UnknownProfileError) Error() string {
	return fmt.Sprintf("spec.profile: unknown profile %q; known profiles: %s", e.Name, strings.Join(cache.ProfileNames(), ", "))
}

// Resolve decides the topology, plan, layout and group shape of a HiCacheDeployment.
func Resolve(hcd *hicachev1alpha1.HiCacheDeployment) (*Resolved, error) {
	spec := &hcd.Spec
	if spec.Profile != "" {
		if _, ok := cache.LookupProfile(string(spec.Profile)); !ok {
			return nil, &UnknownProfileError{Name: string(spec.Profile)}
		}
	}
	topo, err := cache.ResolveTopology(string(spec.Profile), explicitTopology(spec))
	if err != nil {
		return nil, &FieldError{Field: "spec.topology", Message: err.Error()}
	}
	plan, err := cache.Plan(topo)
	if err != nil {
		return nil, &FieldError{Field: "spec.topology", Message: err.Error()}
	}
	settings, err := Settings(spec)
	if err != nil {
		return nil, err
	}
	facts := cache.Facts(topo, settings)
	r := &Resolved{
		Topology:    topo,
		Settings:    settings,
		Plan:        plan,
		Facts:       facts,
		Fingerprint: facts.Fingerprint(),
		ShortHash:   facts.ShortFingerprint(),
		Namespace:   cache.Namespace(facts),
		Replicas:    1,
	}
	if spec.Storage != nil && spec.Storage.NamespaceStrategy == hicachev1alpha1.NamespaceFixed {
		r.Namespace = spec.Storage.Namespace
	}
	if spec.Replicas != nil {
		r.Replicas = int(*spec.Replicas)
	}
	if err := r.shape(spec.Topology); err != nil {
		return nil, err
	}
	return r, nil
}

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
		return &FieldError{Field: "spec.topology", Message: fmt.Sprintf(
			"a serving group needs %d GPUs (tensorParallel %d x pipelineParallel %d x dataParallel %d), which is not a whole number of %d-GPU nodes",
			gpus, tp, pp, dp, perNode)}
	}
	r.Nodes, r.GPUsPerPod = gpus/perNode, perNode
	return nil
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
			HostPoolKind: cache.HostPoolKind(d.HostPool),
		}
		if d.PackedLayers != nil {
			out.Draft.PackedLayers = int(*d.PackedLayers)
			if *d.PackedLayers > 0 {
				out.Draft.Placement = cache.DraftPlacementPacked
			} else {
				out.Draft.Placement = cache.DraftPlacementSidecar
			}
		}
	}
	return out
}

// Settings are the cache-relevant server settings of a spec.
func Settings(spec *hicachev1alpha1.HiCacheDeploymentSpec) (cache.Settings, error) {
	h := spec.HiCache
	s := cache.Settings{
		ModelPath:       spec.Model.Path,
		Revision:        spec.Model.Revision,
		ServedModelName: ServedModelName(spec),
		KVCacheDType:    string(h.KVCacheDType),
		HostMemLayout:   string(h.MemLayout),
		MambaSSMDType:   h.MambaSSMDType,
		Quantization:    spec.Model.Quantization,
		SGLangVersion:   spec.SGLang.VersionLine,
		PageSize:        int(h.PageSize),
		HostMemoryMode:  string(h.HostMemoryMode),
		HiCacheSizeGB:   float64(h.SizeGB),
		WritePolicy:     string(h.WritePolicy),
		PrefetchPolicy:  string(h.PrefetchPolicy),
		IOBackend:       string(h.IOBackend),
	}
	if s.SGLangVersion == "" {
		s.SGLangVersion = DefaultSGLangVersion
	}
	if d := spec.Topology.Draft; d != nil {
		s.DraftKVCacheDType = string(d.KVCacheDType)
	}
	if h.Ratio != "" {
		ratio, err := strconv.ParseFloat(h.Ratio, 64)
		if err != nil || ratio <= 1 {
			return s, &FieldError{Field: "spec.hicache.ratio", Message: fmt.Sprintf("%q is not a number greater than 1", h.Ratio)}
		}
		s.HiCacheRatio = ratio
	}
	return s, nil
}

// ServedModelName is the name the model is served under: spec.model.servedName, else its path.
func ServedModelName(spec *hicachev1alpha1.HiCacheDeploymentSpec) string {
	if spec.Model.ServedName != "" {
		return spec.Model.ServedName
	}
	return spec.Model.Path
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
	return cache.Config{Topology: r.Topology, Settings: r.Settings, Replicas: r.Replicas, Other: other}
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
func (r *Resolved) Writers() int {
	n := 0
	for _, rank := range r.Plan.Ranks {
		if rank.HasDuties() {
			n++
		}
	}
	return n
}

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
