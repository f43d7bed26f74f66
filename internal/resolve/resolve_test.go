package resolve_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

func mustResolve(t *testing.T, h *hicachev1alpha1.HiCacheDeployment) *resolve.Resolved {
	t.Helper()
	r, err := resolve.Resolve(h)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return r
}

// shape is the part of Resolved that decides the pods of one serving group.
type shape struct{ GPUs, Nodes, GPUsPerPod, Replicas int }

func shapeOf(r *resolve.Resolved) shape {
	return shape{GPUs: r.GPUs, Nodes: r.Nodes, GPUsPerPod: r.GPUsPerPod, Replicas: r.Replicas}
}

// groupWant is what a sample's comment promises of its serving groups (of one role, with roles).
type groupWant struct {
	shape      shape
	writers    int
	segmentGiB int64 // the memory each rank lends to the store
}

func TestResolveSamples(t *testing.T) {
	// What each sample's comment promises.
	cases := map[string]struct {
		groupWant
		// prefill and decode replace groupWant for a sample with spec.roles.
		prefill, decode *groupWant
		attention       cache.AttentionKind
		draft           string
		fixedNS         string // "" for the LayoutHash strategy
		router          string // the mode of its router, "" without spec.router
	}{
		"hicachedeployment_deepseek_v4.yaml": {
			groupWant: groupWant{shape: shape{GPUs: 16, Nodes: 2, GPUsPerPod: 8, Replicas: 1}, writers: 1, segmentGiB: 16},
			attention: cache.AttentionDSV4, draft: "DSPARK (packed, 3 layers)",
		},
		"hicachedeployment_qwen3.yaml": {
			groupWant: groupWant{shape: shape{GPUs: 4, Nodes: 1, GPUsPerPod: 4, Replicas: 1}, writers: 4, segmentGiB: 4},
			attention: cache.AttentionMHA, draft: "none",
		},
		"hicachedeployment_kimi_k2_eagle3.yaml": {
			groupWant: groupWant{shape: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 1}, writers: 8},
			attention: cache.AttentionMLA, draft: "EAGLE3 (sidecar, MHA pool)",
		},
		"hicachedeployment_qwen3_next.yaml": {
			groupWant: groupWant{shape: shape{GPUs: 4, Nodes: 1, GPUsPerPod: 4, Replicas: 1}, writers: 4},
			attention: cache.AttentionHybridMambaMHA, draft: "none", fixedNS: "qwen3-next",
		},
		"pd_deepseek_v4.yaml": {
			// Two prefill groups of TP 8 on one node, writing from TP0; one decode group of TP 16
			// on two nodes, without L3: it lends nothing to the store.
			prefill:   &groupWant{shape: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 2}, writers: 1, segmentGiB: 16},
			decode:    &groupWant{shape: shape{GPUs: 16, Nodes: 2, GPUsPerPod: 8, Replicas: 1}, writers: 0, segmentGiB: 0},
			attention: cache.AttentionDSV4, draft: "EAGLE (packed, 1 layer)", router: "prefill/decode",
		},
	}
	for _, file := range hcdSamples(t) {
		if _, ok := cases[file]; !ok {
			t.Errorf("sample %s has no expectations in TestResolveSamples: add it", file)
		}
	}
	be := &resolve.Backend{Name: "mooncake", RPCAddress: "mooncake-master.default.svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
	for file, tc := range cases {
		t.Run(file, func(t *testing.T) {
			h := loadSample(t, file)
			// check checks the groups of the deployment, or of one of its roles.
			check := func(what string, r *resolve.Resolved, want groupWant, render func(addr string) (*sglang.MooncakeConfig, int, error)) {
				t.Helper()
				if diff := cmp.Diff(want.shape, shapeOf(r)); diff != "" {
					t.Errorf("%s: group shape (-want +got):\n%s", what, diff)
				}
				if r.Topology.Attention != tc.attention {
					t.Errorf("%s: attention = %s, want %s", what, r.Topology.Attention, tc.attention)
				}
				if got := r.Writers(); got != want.writers {
					t.Errorf("%s: Writers() = %d, want %d (plan: %s)", what, got, want.writers, r.Plan.Summary())
				}
				if got := r.DraftSummary(); got != tc.draft {
					t.Errorf("%s: DraftSummary() = %q, want %q", what, got, tc.draft)
				}
				if got := r.Plan.NumRanks(); got != want.shape.GPUs {
					t.Errorf("%s: the plan has %d ranks, the group %d GPUs", what, got, want.shape.GPUs)
				}
				var addr string
				if r.Nodes > 1 {
					addr = "leader.default.svc:20102"
				}
				mc, nnodes, err := render(addr)
				if err != nil {
					t.Fatalf("%s: rendering the server's command line: %v", what, err)
				}
				switch {
				case mc == nil && want.writers > 0:
					t.Errorf("%s: groups that write to L3 have no Mooncake config", what)
				case mc != nil && mc.ExtraBackendTag != r.Namespace:
					t.Errorf("%s: extra_backend_tag = %q, want the namespace %q", what, mc.ExtraBackendTag, r.Namespace)
				}
				// The sample's globalSegmentSize is per rank; SGLang divides the rendered value
				// by the attention-TP size × the PP size.
				if got, want := r.SegmentPerRank, want.segmentGiB<<30; got != want {
					t.Errorf("%s: SegmentPerRank = %d bytes, want %d", what, got, want)
				}
				if mc != nil {
					if got, want := mc.GlobalSegmentSize, want.segmentGiB<<30*int64(r.Plan.AttentionTP*r.Plan.PipelineParallel); got != want {
						t.Errorf("%s: GlobalSegmentSize = %d bytes, want %d", what, got, want)
					}
				}
				if nnodes != max(r.Nodes, 1) && !(r.Nodes == 1 && nnodes == 0) {
					t.Errorf("%s: NNodes = %d for a group of %d nodes", what, nnodes, r.Nodes)
				}
			}
			var namespace string
			if tc.prefill == nil {
				r := mustResolve(t, h)
				check("the groups", r, tc.groupWant, func(addr string) (*sglang.MooncakeConfig, int, error) {
					cfg, mc, err := resolve.ServerConfig(h, r, be, addr)
					return mc, cfg.NNodes, err
				})
				namespace = r.Namespace
				if tc.fixedNS == "" && r.Namespace != cache.NamespacePrefixTag+r.ShortHash {
					t.Errorf("Namespace = %q, want %q", r.Namespace, cache.NamespacePrefixTag+r.ShortHash)
				}
			} else {
				roles, err := resolve.RolesOf(h)
				if err != nil {
					t.Fatalf("RolesOf: %v", err)
				}
				for _, rr := range roles.Each() {
					want := *tc.prefill
					if rr.Role == hicachev1alpha1.RoleDecode {
						want = *tc.decode
					}
					check(string(rr.Role)+" role", rr.Resolved, want, func(addr string) (*sglang.MooncakeConfig, int, error) {
						cfg, mc, err := resolve.RoleServerConfig(roles, rr, be, addr)
						return mc, cfg.NNodes, err
					})
				}
				// One namespace, the prefill's layout hash.
				namespace = roles.Namespace()
				if roles.Decode.Namespace != namespace {
					t.Errorf("decode namespace %q, prefill %q: want one", roles.Decode.Namespace, namespace)
				}
				if tc.fixedNS == "" && namespace != cache.NamespacePrefixTag+roles.Prefill.ShortHash {
					t.Errorf("Namespace = %q, want %q", namespace, cache.NamespacePrefixTag+roles.Prefill.ShortHash)
				}
			}
			if tc.fixedNS != "" && namespace != tc.fixedNS {
				t.Errorf("Namespace = %q, want %q", namespace, tc.fixedNS)
			}

			// The router a sample asks for renders a command line the pinned router accepts.
			switch {
			case tc.router == "" && h.Spec.Router != nil:
				t.Errorf("the sample has spec.router; the test expects none")
			case tc.router != "" && h.Spec.Router == nil:
				t.Errorf("the sample has no spec.router; the test expects a %s router", tc.router)
			case h.Spec.Router != nil:
				cfg, err := resolve.RouterConfig(h)
				if err != nil {
					t.Fatalf("RouterConfig: %v", err)
				}
				if mode := map[bool]string{true: "prefill/decode", false: "regular"}[cfg.PD()]; mode != tc.router {
					t.Errorf("the router runs in %s mode, want %s", mode, tc.router)
				}
				if _, err := router.Args(cfg); err != nil {
					t.Errorf("the router's command line: %v", err)
				}
			}
		})
	}
}

func TestResolveGroupShape(t *testing.T) {
	cases := map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want shape
	}{
		"one GPU, gpusPerNode unset": {
			hcd: makeHCD("a").GPUsPerNode(0).Obj(), want: shape{GPUs: 1, Nodes: 1, GPUsPerPod: 1, Replicas: 1},
		},
		"TP4 on a node of 8 uses half of it": {
			hcd: makeHCD("a").TP(4).Obj(), want: shape{GPUs: 4, Nodes: 1, GPUsPerPod: 4, Replicas: 1},
		},
		"TP8 fills one node": {
			hcd: makeHCD("a").TP(8).Obj(), want: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 1},
		},
		"TP16 spans two nodes": {
			hcd: makeHCD("a").Profile("DeepSeekV4").TP(16).Obj(), want: shape{GPUs: 16, Nodes: 2, GPUsPerPod: 8, Replicas: 1},
		},
		"TP8 x PP2 spans two nodes": {
			hcd: makeHCD("a").TP(8).PP(2).Obj(), want: shape{GPUs: 16, Nodes: 2, GPUsPerPod: 8, Replicas: 1},
		},
		"TP4 x PP4 on 4-GPU nodes": {
			hcd: makeHCD("a").TP(4).PP(4).GPUsPerNode(4).Obj(), want: shape{GPUs: 16, Nodes: 4, GPUsPerPod: 4, Replicas: 1},
		},
		"DP without DP attention multiplies the GPUs": {
			hcd: makeHCD("a").TP(4).DP(2).Obj(), want: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 1},
		},
		"DP4 without DP attention fills a 16-GPU node": {
			hcd: makeHCD("a").TP(4).DP(4).GPUsPerNode(16).Obj(), want: shape{GPUs: 16, Nodes: 1, GPUsPerPod: 16, Replicas: 1},
		},
		"DP attention splits the TP group and adds no GPU": {
			hcd: makeHCD("a").TP(8).DP(4).DPAttention().Obj(), want: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 1},
		},
		"DP attention over two nodes": {
			hcd: makeHCD("a").Profile("DeepSeekV3").TP(16).DP(8).DPAttention().Obj(), want: shape{GPUs: 16, Nodes: 2, GPUsPerPod: 8, Replicas: 1},
		},
		"replicas count groups, not GPUs": {
			hcd: makeHCD("a").TP(8).Replicas(3).Obj(), want: shape{GPUs: 8, Nodes: 1, GPUsPerPod: 8, Replicas: 3},
		},
		"replicas unset is one group": {
			hcd:  func() *hicachev1alpha1.HiCacheDeployment { h := makeHCD("a").Obj(); h.Spec.Replicas = nil; return h }(),
			want: shape{GPUs: 1, Nodes: 1, GPUsPerPod: 1, Replicas: 1},
		},
		"scaled to zero": {
			hcd: makeHCD("a").TP(2).Replicas(0).Obj(), want: shape{GPUs: 2, Nodes: 1, GPUsPerPod: 2, Replicas: 0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := mustResolve(t, tc.hcd)
			if diff := cmp.Diff(tc.want, shapeOf(r)); diff != "" {
				t.Errorf("shape (-want +got):\n%s", diff)
			}
			if got := r.Plan.NumRanks(); got != r.GPUs {
				t.Errorf("the plan has %d ranks for %d GPUs", got, r.GPUs)
			}
		})
	}
}

func TestResolveRefusesGroupsOfPartNodes(t *testing.T) {
	cases := map[string]struct {
		hcd *hicachev1alpha1.HiCacheDeployment
		// want are the phrases the message must hold: the field and the numbers.
		want []string
	}{
		"TP4 x PP3 on 8-GPU nodes": {
			hcd:  makeHCD("a").TP(4).PP(3).Obj(),
			want: []string{"spec.topology", "12 GPUs", "tensorParallel 4", "pipelineParallel 3", "8-GPU nodes"},
		},
		"TP4 x DP3 without DP attention": {
			hcd:  makeHCD("a").TP(4).DP(3).Obj(),
			want: []string{"spec.topology", "12 GPUs", "tensorParallel 4", "dataParallel 3", "8-GPU nodes"},
		},
		"TP12 on 8-GPU nodes": {
			hcd:  makeHCD("a").TP(12).Obj(),
			want: []string{"spec.topology", "12 GPUs", "tensorParallel 12", "8-GPU nodes"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := resolve.Resolve(tc.hcd)
			var fe *resolve.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Resolve error = %v, want a *FieldError", err)
			}
			if fe.Field != "spec.topology" {
				t.Errorf("Field = %q, want spec.topology", fe.Field)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not say %q", err.Error(), w)
				}
			}
		})
	}
}

func TestResolveNamespace(t *testing.T) {
	hashed := mustResolve(t, makeHCD("a").TP(4).Storage("mc").Obj())
	fixed := mustResolve(t, makeHCD("a").TP(4).Storage("mc").Fixed("shared-ns").Obj())
	none := mustResolve(t, makeHCD("a").TP(4).Obj())

	if want := cache.Namespace(hashed.Facts); hashed.Namespace != want {
		t.Errorf("LayoutHash namespace = %q, want %q", hashed.Namespace, want)
	}
	if !strings.HasPrefix(hashed.Namespace, cache.NamespacePrefixTag) || !strings.HasSuffix(hashed.Namespace, hashed.ShortHash) {
		t.Errorf("LayoutHash namespace %q is not %s<short hash %s>", hashed.Namespace, cache.NamespacePrefixTag, hashed.ShortHash)
	}
	if fixed.Namespace != "shared-ns" {
		t.Errorf("Fixed namespace = %q, want the spec's shared-ns", fixed.Namespace)
	}
	// The strategy decides where objects go, not what they hold.
	if fixed.Fingerprint != hashed.Fingerprint {
		t.Errorf("the Fixed strategy changed the layout fingerprint: %s vs %s", fixed.Fingerprint, hashed.Fingerprint)
	}
	if none.Namespace != hashed.Namespace {
		t.Errorf("without storage the planned namespace is %q, with storage %q", none.Namespace, hashed.Namespace)
	}

	// A breaking change moves a LayoutHash deployment and keeps a Fixed one.
	hashed2 := mustResolve(t, makeHCD("a").TP(4).KVDType("fp8_e4m3").Storage("mc").Obj())
	fixed2 := mustResolve(t, makeHCD("a").TP(4).KVDType("fp8_e4m3").Storage("mc").Fixed("shared-ns").Obj())
	if hashed2.Namespace == hashed.Namespace {
		t.Errorf("a new KV dtype kept the LayoutHash namespace %s", hashed.Namespace)
	}
	if fixed2.Namespace != fixed.Namespace || fixed2.Fingerprint == fixed.Fingerprint {
		t.Errorf("Fixed: namespace %s → %s, fingerprint %s → %s; want the namespace kept and the fingerprint changed",
			fixed.Namespace, fixed2.Namespace, fixed.ShortHash, fixed2.ShortHash)
	}
	// A neutral change moves nothing.
	neutral := mustResolve(t, makeHCD("a").TP(4).Ratio("3").Replicas(4).Storage("mc").Obj())
	if neutral.Namespace != hashed.Namespace {
		t.Errorf("a new ratio and replica count moved the namespace %s → %s", hashed.Namespace, neutral.Namespace)
	}
}

func TestResolveUnknownProfile(t *testing.T) {
	_, err := resolve.Resolve(makeHCD("a").Profile("GPT5").Obj())
	var up *resolve.UnknownProfileError
	if !errors.As(err, &up) {
		t.Fatalf("Resolve error = %v, want an *UnknownProfileError", err)
	}
	if up.Name != "GPT5" {
		t.Errorf("Name = %q, want GPT5", up.Name)
	}
	msg := err.Error()
	for _, w := range append([]string{"spec.profile", `"GPT5"`}, cache.ProfileNames()...) {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not name %q", msg, w)
		}
	}
}

func TestResolveInvalidTopologyNamesTheField(t *testing.T) {
	cases := map[string]*hicachev1alpha1.HiCacheDeployment{
		"no profile and no attention":           makeHCD("a").Profile("").Obj(),
		"a draft the profile has no layout for": makeHCD("a").Profile("KimiK2").TP(8).Draft("NEXTN").Obj(),
		"DSpark packed on a non-DSV4 model": func() *hicachev1alpha1.HiCacheDeployment {
			return makeHCD("a").Profile("DeepSeekV3").TP(8).Draft("DSPARK").Packed(3).Obj()
		}(),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := resolve.Resolve(h)
			var fe *resolve.FieldError
			if !errors.As(err, &fe) || fe.Field != "spec.topology" {
				t.Fatalf("Resolve error = %v, want a FieldError on spec.topology", err)
			}
			// The message names the API's own field, e.g. spec.topology.draft.algorithm.
			if !strings.HasPrefix(err.Error(), "spec.topology") {
				t.Errorf("message %q does not start with the field", err.Error())
			}
			for _, internal := range []string{"hostPoolKind", "placement", " topology."} {
				if strings.Contains(err.Error(), internal) {
					t.Errorf("message %q names %q, which the API does not have", err.Error(), internal)
				}
			}
		})
	}
}

func TestSettingsRatio(t *testing.T) {
	cases := map[string]struct {
		ratio   string
		want    float64
		wantErr bool
	}{
		"unset leaves the release's choice": {ratio: "", want: 0},
		"whole number":                      {ratio: "2", want: 2},
		"fraction above one":                {ratio: "1.5", want: 1.5},
		"one is no larger than the GPU":     {ratio: "1", wantErr: true},
		"below one":                         {ratio: "0.5", wantErr: true},
		"zero":                              {ratio: "0", wantErr: true},
		"negative":                          {ratio: "-3", wantErr: true},
		"not a number":                      {ratio: "two", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("a").Ratio(tc.ratio).Obj()
			s, err := resolve.Settings(&h.Spec)
			if tc.wantErr {
				var fe *resolve.FieldError
				if !errors.As(err, &fe) || fe.Field != "spec.hicache.ratio" {
					t.Fatalf("Settings error = %v, want a FieldError on spec.hicache.ratio", err)
				}
				if !strings.Contains(err.Error(), `"`+tc.ratio+`"`) {
					t.Errorf("message %q does not quote the value", err.Error())
				}
				// Resolve reports the same error.
				if _, rerr := resolve.Resolve(h); rerr == nil || rerr.Error() != err.Error() {
					t.Errorf("Resolve error = %v, want %v", rerr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Settings: %v", err)
			}
			if s.HiCacheRatio != tc.want {
				t.Errorf("HiCacheRatio = %v, want %v", s.HiCacheRatio, tc.want)
			}
		})
	}
}

func TestSettingsCarryTheSpec(t *testing.T) {
	h := makeHCD("a").Draft("EAGLE3").KVDType("fp8_e4m3").Obj()
	h.Spec.Model.Revision = "abc123abc123abc123abc123abc123abc123abc1"
	h.Spec.Model.Quantization = "fp8"
	h.Spec.HiCache = hicachev1alpha1.HiCacheSpec{
		HostMemoryMode: "cache", SizeGB: 64, WritePolicy: "write_back", IOBackend: "direct",
		MemLayout: "page_first_direct", PrefetchPolicy: "best_effort", PageSize: 32, KVCacheDType: "fp8_e4m3",
	}
	h.Spec.Topology.Draft.KVCacheDType = "bf16"
	got, err := resolve.Settings(&h.Spec)
	if err != nil {
		t.Fatal(err)
	}
	want := cache.Settings{
		ModelPath: "org/a", Revision: "abc123abc123abc123abc123abc123abc123abc1", ServedModelName: "org/a", KVCacheDType: "fp8_e4m3",
		DraftKVCacheDType: "bf16", HostMemLayout: "page_first_direct", Quantization: "fp8",
		SGLangVersion: "0.5", PageSize: 32, HostMemoryMode: "cache", HiCacheSizeGB: 64,
		WritePolicy: "write_back", PrefetchPolicy: "best_effort", IOBackend: "direct",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Settings (-want +got):\n%s", diff)
	}
	// The release is the image's: a version line that agrees with it changes nothing, one that
	// does not is refused.
	h.Spec.SGLang.VersionLine = "0.5"
	if got, err := resolve.Settings(&h.Spec); err != nil || got.SGLangVersion != "0.5" {
		t.Errorf("with versionLine 0.5: SGLangVersion = %q, %v; want the image's 0.5", got.SGLangVersion, err)
	}
	h.Spec.SGLang.VersionLine = "0.6"
	if _, err := resolve.Settings(&h.Spec); err == nil || !strings.Contains(err.Error(), "spec.sglang.versionLine: 0.6 disagrees with the image") {
		t.Errorf("with versionLine 0.6: error %v, want it refused", err)
	}
}

func TestServedModelName(t *testing.T) {
	cases := map[string]struct {
		served, want string
	}{
		"defaults to the model path": {served: "", want: "org/a"},
		"the spec's name wins":       {served: "chat", want: "chat"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("a").Served(tc.served).Obj()
			if got := resolve.ServedModelName(&h.Spec); got != tc.want {
				t.Errorf("ServedModelName = %q, want %q", got, tc.want)
			}
			if r := mustResolve(t, h); r.Settings.ServedModelName != tc.want {
				t.Errorf("Settings.ServedModelName = %q, want %q", r.Settings.ServedModelName, tc.want)
			}
		})
	}
}

func TestDraftSummary(t *testing.T) {
	cases := map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want string
	}{
		"no draft":                      {hcd: makeHCD("a").Obj(), want: "none"},
		"DeepSeek-V4 DSpark packs 3":    {hcd: makeHCD("a").Profile("DeepSeekV4").TP(8).Draft("DSPARK").Obj(), want: "DSPARK (packed, 3 layers)"},
		"one packed layer is singular":  {hcd: makeHCD("a").Profile("DeepSeekV3").TP(8).Draft("NEXTN").Obj(), want: "NEXTN (packed, 1 layer)"},
		"packed layers overridden":      {hcd: makeHCD("a").Profile("DeepSeekV4").TP(8).Draft("DSPARK").Packed(2).Obj(), want: "DSPARK (packed, 2 layers)"},
		"sidecar with its own MHA pool": {hcd: makeHCD("a").Profile("KimiK2").TP(8).Draft("EAGLE3").Obj(), want: "EAGLE3 (sidecar, MHA pool)"},
		"NGRAM keeps no KV":             {hcd: makeHCD("a").Draft("NGRAM").Obj(), want: "NGRAM"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mustResolve(t, tc.hcd).DraftSummary(); got != tc.want {
				t.Errorf("DraftSummary() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConfigNeutralFields(t *testing.T) {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}
	cases := map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want map[string]string
	}{
		"nothing set": {hcd: makeHCD("a").Obj(), want: map[string]string{}},
		"image":       {hcd: makeHCD("a").Image("mirror.test/lmsysorg/sglang:v0.5.23").Obj(), want: map[string]string{"image": "mirror.test/lmsysorg/sglang:v0.5.23"}},
		"resources": {
			hcd:  func() *hicachev1alpha1.HiCacheDeployment { h := makeHCD("a").Obj(); h.Spec.Resources = res; return h }(),
			want: map[string]string{"resources": res.String()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := mustResolve(t, tc.hcd)
			c := r.Config(tc.hcd)
			if diff := cmp.Diff(tc.want, c.Other); diff != "" {
				t.Errorf("Other (-want +got):\n%s", diff)
			}
			if c.Replicas != r.Replicas {
				t.Errorf("Replicas = %d, want %d", c.Replicas, r.Replicas)
			}
			if diff := cmp.Diff(r.Topology, c.Topology); diff != "" {
				t.Errorf("Topology differs from the resolved one:\n%s", diff)
			}
			if diff := cmp.Diff(r.Settings, c.Settings); diff != "" {
				t.Errorf("Settings differ from the resolved ones:\n%s", diff)
			}
		})
	}

	// Another image of the same release or more CPU is a neutral change; a new KV dtype is breaking.
	base := makeHCD("a").Obj()
	old := mustResolve(t, base).Config(base)
	for name, tc := range map[string]struct {
		hcd  *hicachev1alpha1.HiCacheDeployment
		want cache.ChangeKind
	}{
		"image":    {hcd: makeHCD("a").Image("lmsysorg/sglang:v0.5.23-cu129").Obj(), want: cache.Neutral},
		"kv dtype": {hcd: makeHCD("a").KVDType("fp8_e4m3").Obj(), want: cache.Breaking},
	} {
		t.Run("classify "+name, func(t *testing.T) {
			got := cache.Classify(old, mustResolve(t, tc.hcd).Config(tc.hcd))
			if got.Kind != tc.want {
				t.Errorf("Classify = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestFactList(t *testing.T) {
	r := mustResolve(t, makeHCD("a").Profile("DeepSeekV4").TP(16).Draft("DSPARK").Obj())
	got := r.FactList()
	if len(got) != len(r.Facts) {
		t.Fatalf("FactList has %d lines for %d facts: %q", len(got), len(r.Facts), got)
	}
	for i, l := range got {
		name, value, ok := strings.Cut(l, "=")
		if !ok || r.Facts[name] != value {
			t.Errorf("line %d %q is not a fact (%s=%q)", i, l, name, r.Facts[name])
		}
		if prev, _, _ := strings.Cut(got[max(i-1, 0)], "="); i > 0 && prev >= name {
			t.Errorf("FactList is not sorted: %q before %q", got[i-1], l)
		}
	}
}
