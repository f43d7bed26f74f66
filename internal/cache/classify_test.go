package cache

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func cfg(t testing.TB, b *topoBuilder, s Settings) Config {
	t.Helper()
	return Config{Topology: b.Obj(t), Settings: s, Replicas: 1}
}

func TestClassify(t *testing.T) {
	s := Settings{ModelPath: "deepseek-ai/DeepSeek-V4", SGLangVersion: "0.5.20", PageSize: 64}
	sWith := func(f func(*Settings)) Settings { c := s; f(&c); return c }

	type want struct {
		kind          ChangeKind
		breaking      []string
		compatible    []string
		neutral       []string
		sameNamespace bool
	}
	cases := map[string]struct {
		old, new Config
		want     want
	}{
		"DSV4 MTP → DSpark: packed layers 1 → 3 under the same keys": {
			old: cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftNEXTN), s),
			new: cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), s),
			want: want{kind: Breaking, breaking: []string{
				"draft model org/nextn-draft → org/dspark-draft",
				"packed draft layers 1 → 3 (NEXTN → DSPARK)",
			}},
		},
		"DSV4 no draft → MTP": {
			old: cfg(t, mk("DeepSeekV4").TP(8), s),
			new: cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftNEXTN), s),
			want: want{kind: Breaking, breaking: []string{
				"speculative algorithm none → NEXTN",
				"draft KV cache dtype none → auto",
				"draft model none → org/nextn-draft",
				"packed draft layers 0 → 1 (none → NEXTN)",
				"draft placement none → Packed",
			}},
		},
		"packed EAGLE steps 3 → 5: the packed tail layers may follow the steps": {
			old:  cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftEAGLE), sWith(func(c *Settings) { c.DraftNumSteps = 3 })),
			new:  cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftEAGLE), sWith(func(c *Settings) { c.DraftNumSteps = 5 })),
			want: want{kind: Breaking, breaking: []string{"packed draft steps 3 → 5"}},
		},
		"sidecar draft steps and tokens are neutral": {
			old: cfg(t, mk("DeepSeekV3").TP(8).Draft(DraftEAGLE3), sWith(func(c *Settings) { c.DraftNumSteps, c.DraftNumDraftTokens = 3, 4 })),
			new: cfg(t, mk("DeepSeekV3").TP(8).Draft(DraftEAGLE3), sWith(func(c *Settings) { c.DraftNumSteps, c.DraftNumDraftTokens = 5, 6 })),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{
				"draft steps 3 → 5 (only a packed EAGLE draft's host layers follow the steps)",
				"draft tokens 4 → 6 (sizes device rings and verify scratch, no host page)",
			}},
		},
		"DSpark block size is neutral": {
			old: cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), sWith(func(c *Settings) { c.DraftDSparkBlockSize, c.DraftNumDraftTokens = 3, 4 })),
			new: cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), sWith(func(c *Settings) { c.DraftDSparkBlockSize, c.DraftNumDraftTokens = 7, 8 })),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{
				"draft tokens 4 → 8 (sizes device rings and verify scratch, no host page)",
				"DSpark block size 3 → 7 (the draft tokens less one)",
			}},
		},
		"a layout variable set empty is a change from unset": {
			old:  cfg(t, mk("Qwen3").TP(2), s),
			new:  cfg(t, mk("Qwen3").TP(2), sWith(func(c *Settings) { c.LayoutEnv = map[string]string{"OVR": ""} })),
			want: want{kind: Breaking, breaking: []string{`env OVR none → ""`}},
		},
		"KV cache dtype auto → fp8_e4m3": {
			old:  cfg(t, mk("DeepSeekV32").TP(8), s),
			new:  cfg(t, mk("DeepSeekV32").TP(8), sWith(func(c *Settings) { c.KVCacheDType = "fp8_e4m3" })),
			want: want{kind: Breaking, breaking: []string{"KV cache dtype auto → fp8_e4m3"}},
		},
		"page size is compatible: new keys": {
			old: cfg(t, mk("DeepSeekV32").TP(8), s),
			new: cfg(t, mk("DeepSeekV32").TP(8), sWith(func(c *Settings) { c.PageSize = 256 })),
			want: want{kind: Compatible, sameNamespace: true, compatible: []string{
				"page size 64 → 256 (every page gets a new key; old objects are never read again)",
			}},
		},
		"served model name is compatible": {
			old:  cfg(t, mk("Qwen3").TP(2), s),
			new:  cfg(t, mk("Qwen3").TP(2), sWith(func(c *Settings) { c.ServedModelName = "qwen" })),
			want: want{kind: Compatible, sameNamespace: true, compatible: []string{"served model name none → qwen (the key prefix changes)"}},
		},
		"pure MLA TP 8 → 16 keeps the bytes": {
			old: cfg(t, mk("DeepSeekV32").TP(8), s),
			new: cfg(t, mk("DeepSeekV32").TP(16), s),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{
				"tensor parallel 8 → 16 (no rank-sharded pool is written: object bytes unchanged)",
			}},
		},
		"MHA TP 8 → 16 reshards kv": {
			old:  cfg(t, mk("Qwen3").TP(8), s),
			new:  cfg(t, mk("Qwen3").TP(16), s),
			want: want{kind: Breaking, breaking: []string{"TP size of rank-sharded pools 8 → 16 (every shard's bytes change)"}},
		},
		"hybrid MLA TP 8 → 16 reshards mamba": {
			old:  cfg(t, mk("KimiK3").TP(8), s),
			new:  cfg(t, mk("KimiK3").TP(16), s),
			want: want{kind: Breaking, breaking: []string{"TP size of rank-sharded pools 8 → 16 (every shard's bytes change)"}},
		},
		"MHA TP8 → TP16 with DP attention 2 keeps attention-TP 8": {
			old: cfg(t, mk("Qwen3").TP(8), s),
			new: cfg(t, mk("Qwen3").TP(16).DP(2).DPAttention(), s),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{
				"tensor parallel 8 → 16 (rank-sharded pools keep their shard size)",
				"data parallel 1 → 2", "DP attention false → true",
			}},
		},
		"a layout flag in extra args is breaking, against its default": {
			old: cfg(t, mk("Qwen3").TP(4), s),
			new: func() Config {
				c := cfg(t, mk("Qwen3").TP(4), sWith(func(s *Settings) { s.ExtraLayoutArgs = map[string]string{"--dtype": "float16"} }))
				c.Defaults = map[string]string{FactExtraArgPrefix + "--dtype": "auto"}
				return c
			}(),
			want: want{kind: Breaking, breaking: []string{"extra arg --dtype auto → float16"}},
		},
		"a key flag in extra args is compatible and keeps the namespace": {
			old:  cfg(t, mk("Qwen3").TP(4), s),
			new:  cfg(t, mk("Qwen3").TP(4), sWith(func(s *Settings) { s.ExtraKeyArgs = map[string]string{"--chat-template": "chatml"} })),
			want: want{kind: Compatible, compatible: []string{"extra arg --chat-template none → chatml (requests hash to other keys; the bytes behind a key stay the same)"}, sameNamespace: true},
		},
		"replicas, ratio, policies and resources are neutral": {
			old: Config{Topology: mk("GLM5").TP(8).Obj(t), Settings: s, Replicas: 1, Other: map[string]string{"resources": "8 GPUs"}},
			new: Config{Topology: mk("GLM5").TP(8).Obj(t), Replicas: 3, Other: map[string]string{"resources": "8 GPUs, 2Ti memory"},
				Settings: sWith(func(c *Settings) {
					c.HiCacheRatio = 2
					c.WritePolicy = "write_back"
					c.PrefetchPolicy = "wait_complete"
				})},
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{
				"replicas 1 → 3", "hicache ratio none → 2", "write policy none → write_back",
				"prefetch policy none → wait_complete", "resources 8 GPUs → 8 GPUs, 2Ti memory",
			}},
		},
		"NEXTN → EAGLE is the same draft": {
			old:  cfg(t, mk("DeepSeekV32").TP(8).Draft(DraftNEXTN).DraftModel(""), s),
			new:  cfg(t, mk("DeepSeekV32").TP(8).Draft(DraftEAGLE).DraftModel(""), s),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{"speculative algorithm NEXTN → EAGLE (same draft KV layout)"}},
		},
		"a new draft checkpoint under the same algorithm is breaking": {
			old:  cfg(t, mk("Llama3").TP(2).Draft(DraftEAGLE3).DraftModel("org/eagle3-v1"), s),
			new:  cfg(t, mk("Llama3").TP(2).Draft(DraftEAGLE3).DraftModel("org/eagle3-v2"), s),
			want: want{kind: Breaking, breaking: []string{"draft model org/eagle3-v1 → org/eagle3-v2"}},
		},
		"none → NGRAM keeps no draft KV": {
			old:  cfg(t, mk("Llama3").TP(2), s),
			new:  cfg(t, mk("Llama3").TP(2).Draft(DraftNGRAM), s),
			want: want{kind: Neutral, sameNamespace: true, neutral: []string{"speculative algorithm none → NGRAM (same draft KV layout)"}},
		},
		"SGLang post release is another release": {
			old:  cfg(t, mk("Llama3").TP(2), s),
			new:  cfg(t, mk("Llama3").TP(2), sWith(func(c *Settings) { c.SGLangVersion = "0.5.20.post1" })),
			want: want{kind: Breaking, breaking: []string{"SGLang version line 0.5.20 → 0.5.20.post1"}},
		},
		"SGLang image digest of a private build is a layout fact": {
			old:  cfg(t, mk("Llama3").TP(2), sWith(func(c *Settings) { c.SGLangVersion = ""; c.SGLangImage = "sha256:aa" })),
			new:  cfg(t, mk("Llama3").TP(2), sWith(func(c *Settings) { c.SGLangVersion = ""; c.SGLangImage = "sha256:bb" })),
			want: want{kind: Breaking, breaking: []string{"SGLang image sha256:aa → sha256:bb"}},
		},
		"SGLang new release is breaking": {
			old:  cfg(t, mk("Llama3").TP(2), s),
			new:  cfg(t, mk("Llama3").TP(2), sWith(func(c *Settings) { c.SGLangVersion = "0.5.21" })),
			want: want{kind: Breaking, breaking: []string{"SGLang version line 0.5.20 → 0.5.21"}},
		},
		"breaking and compatible together": {
			old: cfg(t, mk("Llama3").TP(2), s),
			new: cfg(t, mk("Llama3").TP(2).PP(2), sWith(func(c *Settings) { c.PageSize = 128 })),
			want: want{kind: Breaking,
				breaking:   []string{"PP size 1 → 2"},
				compatible: []string{"page size 64 → 128 (every page gets a new key; old objects are never read again)"},
			},
		},
		"identical configs": {
			old:  cfg(t, mk("KimiK3").TP(8), s),
			new:  cfg(t, mk("KimiK3").TP(8), s),
			want: want{kind: Neutral, sameNamespace: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Classify(tc.old, tc.new)
			got := want{
				kind:          c.Kind,
				breaking:      c.Descriptions(Breaking),
				compatible:    c.Descriptions(Compatible),
				neutral:       c.Descriptions(Neutral),
				sameNamespace: c.OldNamespace == c.NewNamespace,
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Classify (-want +got):\n%s\n%s", diff, c)
			}
			for i := 1; i < len(c.Changes); i++ {
				if c.Changes[i-1].Kind.rank() < c.Changes[i].Kind.rank() {
					t.Errorf("changes not ordered by severity: %v", c.Changes)
				}
			}
		})
	}
}

func TestChangeString(t *testing.T) {
	s := Settings{ModelPath: "m", PageSize: 64}
	c := Classify(cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftNEXTN), s), cfg(t, mk("DeepSeekV4").TP(8).Draft(DraftDSPARK), Settings{ModelPath: "m", PageSize: 128}))
	got := c.String()
	for _, want := range []string{"Breaking: ", "packed draft layers 1 → 3 (NEXTN → DSPARK)", "page size 64 → 128", "[compatible]"} {
		if !strings.Contains(got, want) {
			t.Errorf("String() = %q, want it to contain %q", got, want)
		}
	}
	if got := Classify(Config{}, Config{}).String(); got != "Neutral: no change" {
		t.Errorf("String() of no change = %q", got)
	}
}
