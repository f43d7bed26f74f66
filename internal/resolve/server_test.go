package resolve_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func testBackend() *resolve.Backend {
	return &resolve.Backend{Name: "mc", RPCAddress: "mc-master.default.svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
}

func TestServerConfigMultiNode(t *testing.T) {
	h := makeHCD("dsv4").Profile("DeepSeekV4").TP(16).Storage("mc").Obj()
	r := mustResolve(t, h)

	_, _, err := resolve.ServerConfig(h, r, testBackend(), "")
	if err == nil || !strings.Contains(err.Error(), "2 nodes") || !strings.Contains(err.Error(), "rendezvous") {
		t.Fatalf("ServerConfig without a rendezvous address: error %v, want one naming the 2 nodes and the rendezvous address", err)
	}

	cfg, _, err := resolve.ServerConfig(h, r, testBackend(), "dsv4-0-0.dsv4-0.default.svc:20102")
	if err != nil {
		t.Fatalf("ServerConfig: %v", err)
	}
	got := struct {
		NNodes             int
		NodeRank, DistInit string
	}{cfg.NNodes, cfg.NodeRankEnv, cfg.DistInitAddr}
	want := struct {
		NNodes             int
		NodeRank, DistInit string
	}{2, "$(NODE_RANK)", "dsv4-0-0.dsv4-0.default.svc:20102"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("multi-node settings (-want +got):\n%s", diff)
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		t.Fatalf("the pinned release refuses the rendered config: %v", err)
	}
	if !containsSeq(args, "--node-rank", "$(NODE_RANK)") || !containsSeq(args, "--nnodes", "2") {
		t.Errorf("args lack --nnodes 2 --node-rank $(NODE_RANK): %q", args)
	}
}

func TestServerConfigSingleNodeIgnoresTheRendezvous(t *testing.T) {
	h := makeHCD("q").TP(4).Obj()
	cfg, _, err := resolve.ServerConfig(h, mustResolve(t, h), nil, "leader:20102")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NNodes != 0 || cfg.DistInitAddr != "" || cfg.NodeRankEnv != "" {
		t.Errorf("a one-node group got NNodes %d, DistInitAddr %q, NodeRankEnv %q", cfg.NNodes, cfg.DistInitAddr, cfg.NodeRankEnv)
	}
	if _, err := sglang.Args(cfg); err != nil {
		t.Errorf("Args: %v", err)
	}
}

func TestServerConfigStorage(t *testing.T) {
	cases := map[string]struct {
		storage       bool
		backend       *resolve.Backend
		fixed         string
		protocol      string
		segment       string
		wantMooncake  bool
		wantSegment   int64
		wantProtocol  string
		wantNamespace func(r *resolve.Resolved) string
	}{
		"no storage: the cache stops at host memory": {storage: false, backend: testBackend()},
		"storage whose backend is not known yet":     {storage: true, backend: nil},
		"LayoutHash namespace is the backend tag": {
			storage: true, backend: testBackend(), wantMooncake: true, wantProtocol: "tcp",
			wantNamespace: func(r *resolve.Resolved) string { return r.Namespace },
		},
		"Fixed namespace is the backend tag": {
			storage: true, backend: testBackend(), fixed: "team-a", wantMooncake: true, wantProtocol: "tcp",
			wantNamespace: func(*resolve.Resolved) string { return "team-a" },
		},
		// spec.storage.globalSegmentSize is per rank; SGLang divides global_segment_size by
		// tp_size × pp_size (4 here).
		"segment size in bytes, rdma": {
			storage: true, backend: testBackend(), protocol: "rdma", segment: "16Gi", wantMooncake: true,
			wantSegment: 4 * 16 << 30, wantProtocol: "rdma",
			wantNamespace: func(r *resolve.Resolved) string { return r.Namespace },
		},
		"decimal segment size": {
			storage: true, backend: testBackend(), segment: "4G", wantMooncake: true,
			wantSegment: 4 * 4_000_000_000, wantProtocol: "tcp",
			wantNamespace: func(r *resolve.Resolved) string { return r.Namespace },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := makeHCD("q").TP(4)
			if tc.storage {
				b.Storage("mc")
				if tc.fixed != "" {
					b.Fixed(tc.fixed)
				}
				if tc.protocol != "" {
					b.Protocol(tc.protocol)
				}
				if tc.segment != "" {
					b.Segment(tc.segment)
				}
			}
			h := b.Obj()
			r := mustResolve(t, h)
			cfg, mc, err := resolve.ServerConfig(h, r, tc.backend, "")
			if err != nil {
				t.Fatalf("ServerConfig: %v", err)
			}
			if cfg.HiCache == nil {
				t.Fatal("HiCache is off")
			}
			if !tc.wantMooncake {
				if mc != nil || cfg.HiCache.StorageBackend != "" || cfg.HiCache.ExtraConfig != nil {
					t.Errorf("got Mooncake config %+v, storage backend %q, extra config %v; want none",
						mc, cfg.HiCache.StorageBackend, cfg.HiCache.ExtraConfig)
				}
				return
			}
			if mc == nil {
				t.Fatal("no Mooncake config")
			}
			ns := tc.wantNamespace(r)
			if ns != r.Namespace {
				t.Errorf("resolved namespace %q, want %q", r.Namespace, ns)
			}
			want := sglang.MooncakeConfig{
				MasterServerAddress: tc.backend.RPCAddress, MetadataServer: tc.backend.MetadataServer,
				GlobalSegmentSize: tc.wantSegment, Protocol: tc.protocol, ExtraBackendTag: ns,
				MasterMetricsPort: tc.backend.MetricsPort, LocalHostname: "$(POD_IP)",
			}
			if tc.protocol == "" {
				want.Protocol = "tcp" // what the API server defaults
			}
			if diff := cmp.Diff(want, *mc); diff != "" {
				t.Errorf("Mooncake config (-want +got):\n%s", diff)
			}
			if cfg.HiCache.StorageBackend != sglang.StorageBackendMooncake {
				t.Errorf("storage backend = %q, want mooncake", cfg.HiCache.StorageBackend)
			}
			for k, v := range map[string]any{
				"extra_backend_tag": ns, "global_segment_size": tc.wantSegment, "protocol": tc.wantProtocol,
				"master_server_address": tc.backend.RPCAddress,
			} {
				if got := cfg.HiCache.ExtraConfig[k]; got != v {
					t.Errorf("extra config %s = %v (%T), want %v (%T)", k, got, got, v, v)
				}
			}
			if _, err := sglang.Args(cfg); err != nil {
				t.Errorf("the pinned release refuses the rendered config: %v", err)
			}
		})
	}
}

func TestServerConfigTopologyAndDraft(t *testing.T) {
	cases := map[string]struct {
		hcd                func() *testutil.HCDBuilder
		tp, pp, dp         int
		dpAttention        bool
		wantSpeculative    *sglang.Speculative
		wantRatio          float64
		wantServed         string
		wantDPFlagInArgs   string
		wantNoDPFlagInArgs bool
	}{
		"DP 1 renders no DP flag": {
			hcd: func() *testutil.HCDBuilder { return makeHCD("q").TP(4) }, tp: 4, wantServed: "org/q", wantNoDPFlagInArgs: true,
		},
		"DP without attention": {
			hcd: func() *testutil.HCDBuilder { return makeHCD("q").TP(4).DP(2) }, tp: 4, dp: 2, wantServed: "org/q", wantDPFlagInArgs: "--dp-size",
		},
		"DP attention": {
			hcd: func() *testutil.HCDBuilder { return makeHCD("q").TP(8).DP(4).DPAttention() },
			tp:  8, dp: 4, dpAttention: true, wantServed: "org/q", wantDPFlagInArgs: "--attn-dp-size",
		},
		"draft and ratio": {
			hcd: func() *testutil.HCDBuilder {
				return makeHCD("k").Profile("KimiK2").TP(8).Draft("EAGLE3").Ratio("2.5").Served("kimi")
			},
			tp: 8, wantRatio: 2.5, wantServed: "kimi", wantNoDPFlagInArgs: true,
			wantSpeculative: &sglang.Speculative{Algorithm: "EAGLE3", DraftModelPath: "org/eagle3-draft", DraftRevision: testutil.ModelCommit, NumSteps: 3, EagleTopK: 1, NumDraftTokens: 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := tc.hcd().Obj()
			if d := h.Spec.Topology.Draft; d != nil && tc.wantSpeculative != nil {
				d.NumSteps, d.EagleTopK, d.NumDraftTokens = 3, 1, 4
			}
			cfg, _, err := resolve.ServerConfig(h, mustResolve(t, h), nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TP != tc.tp || cfg.DP != tc.dp || cfg.EnableDPAttention != tc.dpAttention {
				t.Errorf("TP %d DP %d attention %v, want TP %d DP %d attention %v", cfg.TP, cfg.DP, cfg.EnableDPAttention, tc.tp, tc.dp, tc.dpAttention)
			}
			if cfg.ServedModelName != tc.wantServed {
				t.Errorf("ServedModelName = %q, want %q", cfg.ServedModelName, tc.wantServed)
			}
			if diff := cmp.Diff(tc.wantSpeculative, cfg.Speculative); diff != "" {
				t.Errorf("Speculative (-want +got):\n%s", diff)
			}
			if cfg.HiCache.Ratio != tc.wantRatio {
				t.Errorf("HiCache.Ratio = %v, want %v", cfg.HiCache.Ratio, tc.wantRatio)
			}
			if cfg.Port != resolve.SGLangPort {
				t.Errorf("Port = %d, want %d", cfg.Port, resolve.SGLangPort)
			}
			args, err := sglang.Args(cfg)
			if err != nil {
				t.Fatalf("Args: %v", err)
			}
			joined := strings.Join(args, " ")
			if tc.wantDPFlagInArgs != "" && !containsSeq(args, tc.wantDPFlagInArgs, itoa(tc.dp)) {
				t.Errorf("args lack %s %d: %s", tc.wantDPFlagInArgs, tc.dp, joined)
			}
			if tc.wantNoDPFlagInArgs && (strings.Contains(joined, "--dp-size") || strings.Contains(joined, "--attn-dp-size")) {
				t.Errorf("args have a DP flag: %s", joined)
			}
			if s := tc.wantSpeculative; s != nil && s.DraftRevision != "" && !containsSeq(args, "--speculative-draft-model-revision", s.DraftRevision) {
				t.Errorf("args lack --speculative-draft-model-revision %s: %s", s.DraftRevision, joined)
			}
		})
	}
}

// TestSampleRenderings pins what each shipped sample renders to: its layout namespace and the
// SGLang command line (of each role, for a sample with spec.roles), and its router's command
// line. A change of a sample's namespace moves its users to an empty cache, so it must be a
// reviewed change of the golden file (go test -update).
func TestSampleRenderings(t *testing.T) {
	type rendering struct {
		Namespace   string         `json:"namespace"`
		Fingerprint string         `json:"fingerprint"`
		Facts       []string       `json:"facts"`
		Plan        string         `json:"plan"`
		Draft       string         `json:"draft"`
		GPUs        int            `json:"gpus"`
		Nodes       int            `json:"nodes"`
		GPUsPerPod  int            `json:"gpusPerPod"`
		Args        []string       `json:"args"`
		ExtraConfig map[string]any `json:"extraConfig,omitempty"`
	}
	// withRoles is the rendering of a sample with spec.roles: each role's groups.
	type withRoles struct {
		Namespace string    `json:"namespace"`
		Prefill   rendering `json:"prefill"`
		Decode    rendering `json:"decode"`
		Router    []string  `json:"router,omitempty"`
	}
	be := &resolve.Backend{Name: "mooncake", RPCAddress: "mooncake-master.default.svc:50051", MetadataServer: "P2PHANDSHAKE", MetricsPort: 9003}
	// render is the rendering of the groups named group, of r, whose server config is made by
	// config from the leader's rendezvous address.
	render := func(t *testing.T, group string, r *resolve.Resolved, config func(addr string) (sglang.ServerConfig, error)) rendering {
		t.Helper()
		addr := ""
		if r.Nodes > 1 {
			addr = group + "-0." + group + ".default.svc:20102"
		}
		cfg, err := config(addr)
		if err != nil {
			t.Fatal(err)
		}
		args, err := sglang.Args(cfg)
		if err != nil {
			t.Fatalf("Args: %v", err)
		}
		out := rendering{
			Namespace: r.Namespace, Fingerprint: r.Fingerprint, Facts: r.FactList(), Plan: r.Plan.Summary(),
			Draft: r.DraftSummary(), GPUs: r.GPUs, Nodes: r.Nodes, GPUsPerPod: r.GPUsPerPod, Args: args,
		}
		if cfg.HiCache != nil { // nil on decode servers without L3
			out.ExtraConfig = cfg.HiCache.ExtraConfig
		}
		return out
	}
	for _, file := range hcdSamples(t) {
		name := strings.TrimSuffix(file, ".yaml")
		t.Run(name, func(t *testing.T) {
			h := loadSample(t, file)
			var got any
			if h.Spec.Roles == nil {
				r := mustResolve(t, h)
				if h.Spec.Router != nil {
					t.Fatal("a sample without roles has spec.router: the golden has no place for it yet")
				}
				got = render(t, h.Name+"-0", r, func(addr string) (sglang.ServerConfig, error) {
					cfg, _, err := resolve.ServerConfig(h, r, be, addr)
					return cfg, err
				})
			} else {
				roles, err := resolve.RolesOf(h)
				if err != nil {
					t.Fatal(err)
				}
				of := func(rr *resolve.RoleResolved) rendering {
					return render(t, h.Name+"-"+string(rr.Role)+"-0", rr.Resolved, func(addr string) (sglang.ServerConfig, error) {
						cfg, _, err := resolve.RoleServerConfig(roles, rr, be, addr)
						return cfg, err
					})
				}
				w := withRoles{Namespace: roles.Namespace(), Prefill: of(roles.Prefill), Decode: of(roles.Decode)}
				if h.Spec.Router != nil {
					cfg, err := resolve.RouterConfig(h)
					if err != nil {
						t.Fatal(err)
					}
					if w.Router, err = router.Args(cfg); err != nil {
						t.Fatalf("the router's command line: %v", err)
					}
				}
				got = w
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(got); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", "samples", name+".golden.json"), buf.Bytes())
		})
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	testutil.CompareGolden(t, path, got, *update)
}

func containsSeq(args []string, seq ...string) bool {
	for i := 0; i+len(seq) <= len(args); i++ {
		match := true
		for j, s := range seq {
			if args[i+j] != s {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestRendererErrorsNameSpecFields renders configurations the renderer refuses (the CRD refuses
// them first, so a user meets these only when the two drift) and checks that the messages name
// the spec fields, not the renderer's settings.
func TestRendererErrorsNameSpecFields(t *testing.T) {
	cases := map[string]struct {
		cfg  sglang.ServerConfig
		want []string
	}{
		"layout and io backend": {
			cfg:  sglang.ServerConfig{ModelPath: "m", HiCache: &sglang.HiCache{MemLayout: "page_first_direct", IOBackend: "kernel"}},
			want: []string{"spec.hicache.memLayout page_first_direct needs spec.hicache.ioBackend direct"},
		},
		"ratio and size": {
			cfg:  sglang.ServerConfig{ModelPath: "m", HiCache: &sglang.HiCache{Ratio: 2, SizeGB: 10}},
			want: []string{"spec.hicache.ratio and spec.hicache.sizeGB are both set"},
		},
		"buffer_only without a store": {
			cfg:  sglang.ServerConfig{ModelPath: "m", HiCache: &sglang.HiCache{HostMemoryMode: "buffer_only", WritePolicy: "write_back"}},
			want: []string{"spec.hicache.hostMemoryMode buffer_only needs an L3 store (spec.storage)", "spec.hicache.writePolicy write_back"},
		},
		"dp attention": {
			cfg:  sglang.ServerConfig{ModelPath: "m", TP: 8, DP: 3, EnableDPAttention: true},
			want: []string{"with spec.topology.dpAttention, spec.topology.tensorParallel (8) must be a multiple of spec.topology.dataParallel (3)"},
		},
		"draft": {
			cfg:  sglang.ServerConfig{ModelPath: " ", Speculative: &sglang.Speculative{Algorithm: "EAGLE3", DSparkBlockSize: 4}},
			want: []string{"spec.model.path is empty", "spec.topology.draft.dsparkBlockSize only applies"},
		},
	}
	goField := regexp.MustCompile(`\b(HiCache|Speculative)\.[A-Z]|\bModelPath\b|EnableDPAttention|StorageBackend|IOBackend`)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := sglang.Args(tc.cfg)
			if err == nil {
				t.Fatal("the renderer accepted it")
			}
			msg := resolve.SpecError(err).Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if m := goField.FindString(msg); m != "" {
				t.Errorf("message names the renderer's %q:\n%s", m, msg)
			}
		})
	}
}

// TestServerConfigSegmentPerRank: the memory spec.storage.globalSegmentSize names is what each
// rank mounts. SGLang 0.5.23's MooncakeStore mounts global_segment_size // (tp_size × pp_size),
// tp_size being the attention-TP size, so the operator renders the per-rank value times that.
func TestServerConfigSegmentPerRank(t *testing.T) {
	cases := map[string]struct {
		build      func(b *testutil.HCDBuilder) *testutil.HCDBuilder
		segment    string
		wantGlobal int64
		wantEnv    string
	}{
		"TP1":            {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder { return b }, segment: "4Gi", wantGlobal: 4 << 30, wantEnv: "4gb"},
		"TP4":            {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder { return b.TP(4) }, segment: "4Gi", wantGlobal: 16 << 30, wantEnv: "16gb"},
		"TP2 PP2":        {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder { return b.TP(2).PP(2) }, segment: "1Gi", wantGlobal: 4 << 30, wantEnv: "4gb"},
		"TP16 two nodes": {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder { return b.Profile("DeepSeekV4").TP(16) }, segment: "32Mi", wantGlobal: 512 << 20, wantEnv: "536870912"},
		// With DP attention SGLang's storage config counts the attention-TP size (tp / dp).
		"TP8 DP4 attention": {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder {
			return b.Profile("DeepSeekV3").TP(8).DP(4).DPAttention()
		}, segment: "1Gi", wantGlobal: 2 << 30, wantEnv: "2gb"},
		"pure client": {build: func(b *testutil.HCDBuilder) *testutil.HCDBuilder { return b.TP(8) }, segment: "0", wantGlobal: 0, wantEnv: "0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := tc.build(makeHCD("seg").Storage("mc").Segment(tc.segment)).Obj()
			r := mustResolve(t, h)
			addr := ""
			if r.Nodes > 1 {
				addr = "leader:20102"
			}
			cfg, mc, err := resolve.ServerConfig(h, r, testBackend(), addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.HiCache.ExtraConfig["global_segment_size"]; got != tc.wantGlobal {
				t.Errorf("global_segment_size = %v, want %d (spec %s per rank × attention-TP %d × PP %d)",
					got, tc.wantGlobal, tc.segment, r.Plan.AttentionTP, r.Plan.PipelineParallel)
			}
			per := resource.MustParse(tc.segment)
			if mounted := tc.wantGlobal / int64(r.Plan.AttentionTP*r.Plan.PipelineParallel); mounted != per.Value() {
				t.Errorf("SGLang would mount %d bytes per rank, spec.storage.globalSegmentSize says %d", mounted, per.Value())
			}
			env, err := sglang.Env(*mc)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range env {
				if e.Name == "MOONCAKE_GLOBAL_SEGMENT_SIZE" && e.Value != tc.wantEnv {
					t.Errorf("MOONCAKE_GLOBAL_SEGMENT_SIZE = %q, want %q (the same total as the extra config)", e.Value, tc.wantEnv)
				}
			}
			if got := r.SegmentPerRank; got != per.Value() {
				t.Errorf("SegmentPerRank = %d, want %d", got, per.Value())
			}
		})
	}
}

// TestResolveRefusesASegmentMooncakeCannotMount: Mooncake's setup fails below 16Mi per rank.
func TestResolveRefusesASegmentMooncakeCannotMount(t *testing.T) {
	for _, q := range []string{"8Mi", "1", "-1Gi"} {
		h := makeHCD("seg").TP(4).Storage("mc").Segment(q).Obj()
		_, err := resolve.Resolve(h)
		if err == nil || !strings.Contains(err.Error(), "spec.storage.globalSegmentSize") {
			t.Errorf("segment %s: Resolve error %v, want one naming spec.storage.globalSegmentSize", q, err)
		}
	}
	if _, err := resolve.Resolve(makeHCD("seg").TP(4).Storage("mc").Segment("16Mi").Obj()); err != nil {
		t.Errorf("16Mi per rank: %v", err)
	}
}
