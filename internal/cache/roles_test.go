package cache

import (
	"errors"
	"strings"
	"testing"
)

func TestL3OfRoles(t *testing.T) {
	for name, tc := range map[string]struct {
		role          Role
		mode          DecodeL3
		reads, writes bool
	}{
		"prefill reads and writes":             {role: RolePrefill, reads: true, writes: true},
		"prefill ignores the decode mode":      {role: RolePrefill, mode: DecodeL3None, reads: true, writes: true},
		"decode without L3 does nothing":       {role: RoleDecode, mode: DecodeL3None},
		"decode with the default does nothing": {role: RoleDecode},
		"decode offload only writes":           {role: RoleDecode, mode: DecodeL3Offload, writes: true},
		"decode HiCache reads and writes":      {role: RoleDecode, mode: DecodeL3HiCache, reads: true, writes: true},
	} {
		t.Run(name, func(t *testing.T) {
			got := L3Of(tc.role, tc.mode)
			if got.Reads != tc.reads || got.Writes != tc.writes || got.Reason == "" {
				t.Fatalf("L3Of(%s, %q) = %+v, want reads %v, writes %v and a reason", tc.role, tc.mode, got, tc.reads, tc.writes)
			}
		})
	}
}

func TestRolePlanDuties(t *testing.T) {
	dsv4 := mk("DeepSeekV4").TP(16).Obj(t)
	qwen := mk("Qwen3").TP(4).Obj(t)
	for name, tc := range map[string]struct {
		role    Role
		mode    DecodeL3
		topo    Topology
		writers int // ranks with write duties
		readers int // ranks with reads
	}{
		"DSV4 prefill: TP0 writes, every rank reads":        {role: RolePrefill, topo: dsv4, writers: 1, readers: 16},
		"DSV4 decode without L3: no duties":                 {role: RoleDecode, mode: DecodeL3None, topo: dsv4, writers: 0, readers: 0},
		"DSV4 decode HiCache: as a prefill":                 {role: RoleDecode, mode: DecodeL3HiCache, topo: dsv4, writers: 1, readers: 16},
		"MHA decode offload: every rank writes, none reads": {role: RoleDecode, mode: DecodeL3Offload, topo: qwen, writers: 4, readers: 0},
		"MHA prefill: every rank writes and reads":          {role: RolePrefill, topo: qwen, writers: 4, readers: 4},
	} {
		t.Run(name, func(t *testing.T) {
			plan, err := RolePlan(tc.role, tc.mode, tc.topo)
			if err != nil {
				t.Fatal(err)
			}
			writers, readers := 0, 0
			for _, r := range plan.Ranks() {
				if r.HasDuties() {
					writers++
				}
				if len(r.Reads) > 0 {
					readers++
				}
				if r.Reason == "" {
					t.Errorf("rank %d has no reason", r.GlobalRank)
				}
			}
			if writers != tc.writers || readers != tc.readers {
				t.Fatalf("%d writers and %d readers, want %d and %d:\n%s", writers, readers, tc.writers, tc.readers, plan)
			}
		})
	}
	// The ordinary plan is not changed by a role's plan (they share key slices).
	before := mustPlan(t, qwen)
	if _, err := RolePlan(RoleDecode, DecodeL3None, qwen); err != nil {
		t.Fatal(err)
	}
	if after := mustPlan(t, qwen); after.String() != before.String() {
		t.Fatalf("RolePlan changed the ordinary plan:\n%s\nwant\n%s", after, before)
	}
}

func TestCheckDecodeL3(t *testing.T) {
	for name, tc := range map[string]struct {
		mode DecodeL3
		topo Topology
		want string // "" = accepted
	}{
		"none with anything":              {mode: DecodeL3None, topo: mk("KimiK3").TP(8).Obj(t)},
		"HiCache on DSV4 with MTP":        {mode: DecodeL3HiCache, topo: mk("DeepSeekV4").TP(8).Draft(DraftNEXTN).Obj(t)},
		"HiCache on DSV4 with DSpark":     {mode: DecodeL3HiCache, topo: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK).Obj(t)},
		"HiCache with EAGLE3":             {mode: DecodeL3HiCache, topo: mk("Qwen3").TP(4).Draft(DraftEAGLE3).Obj(t)},
		"HiCache refuses STANDALONE":      {mode: DecodeL3HiCache, topo: mk("Qwen3").TP(4).Draft(DraftStandalone).Obj(t), want: "does not serve the STANDALONE draft"},
		"HiCache refuses NGRAM":           {mode: DecodeL3HiCache, topo: mk("Qwen3").TP(4).Draft(DraftNGRAM).Obj(t), want: "does not serve the NGRAM draft"},
		"HiCache refuses DFLASH":          {mode: DecodeL3HiCache, topo: mk("Qwen3").TP(4).Draft(DraftDFLASH).Obj(t), want: "does not serve the DFLASH draft"},
		"offload on MHA":                  {mode: DecodeL3Offload, topo: mk("Qwen3").TP(4).Obj(t)},
		"offload on MLA":                  {mode: DecodeL3Offload, topo: mk("DeepSeekV3").TP(8).Obj(t)},
		"offload with NGRAM keeps no KV":  {mode: DecodeL3Offload, topo: mk("Qwen3").TP(4).Draft(DraftNGRAM).Obj(t)},
		"offload refused on DSV4":         {mode: DecodeL3Offload, topo: mk("DeepSeekV4").TP(8).Obj(t), want: "refused by SGLang for DSV4 models"},
		"offload refused on hybrid Mamba": {mode: DecodeL3Offload, topo: mk("Qwen3Next").TP(4).Obj(t), want: "refused by SGLang for HybridMambaMHA models"},
		"offload refused with an indexer": {mode: DecodeL3Offload, topo: mk("DeepSeekV32").TP(8).Obj(t), want: "without the model's indexer pool"},
		"offload refused with packed MTP": {mode: DecodeL3Offload, topo: mk("DeepSeekV3").TP(8).Draft(DraftNEXTN).Obj(t), want: "without the NEXTN draft's layers"},
		"offload refused with a sidecar":  {mode: DecodeL3Offload, topo: mk("Qwen3").TP(4).Draft(DraftEAGLE3).Obj(t), want: "without the EAGLE3 draft's layers"},
		"unknown mode":                    {mode: "Sometimes", topo: mk("Qwen3").Obj(t), want: `"Sometimes" is not one of`},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckDecodeL3(tc.mode, tc.topo)
			checkRoleProblem(t, err, "decode.l3", tc.want)
		})
	}
}

func TestCheckRolePair(t *testing.T) {
	s := Settings{ModelPath: "m", SGLangVersion: "0.5"}
	pair := func(p, d Topology) (Topology, Topology, LayoutFacts, LayoutFacts) {
		return p, d, Facts(p, s), Facts(d, s)
	}
	for name, tc := range map[string]struct {
		prefill, decode Topology
		mode            DecodeL3
		field, want     string
	}{
		"DSV4 TP 8 prefill, TP 16 decode, no draft": {
			prefill: mk("DeepSeekV4").TP(8).Obj(t), decode: mk("DeepSeekV4").TP(16).Obj(t)},
		"DSV4 TP 8 and 16 share a namespace with decode HiCache (replicated pools)": {
			prefill: mk("DeepSeekV4").TP(8).Obj(t), decode: mk("DeepSeekV4").TP(16).Obj(t), mode: DecodeL3HiCache},
		"DSV4 MTP across TP sizes": {
			prefill: mk("DeepSeekV4").TP(8).Draft(DraftNEXTN).Obj(t), decode: mk("DeepSeekV4").TP(16).Draft(DraftNEXTN).Obj(t)},
		"DSV4 DSpark needs one attention TP": {
			prefill: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK).Obj(t), decode: mk("DeepSeekV4").TP(16).Draft(DraftDSPARK).Obj(t),
			field: "decode.topology.tensorParallel", want: "prefill has 8, decode 16"},
		"DSV4 DSpark with DP attention counts attention TP": {
			prefill: mk("DeepSeekV4").TP(8).Draft(DraftDSPARK).Obj(t), decode: mk("DeepSeekV4").TP(16).DP(2).DPAttention().Draft(DraftDSPARK).Obj(t)},
		"a draft with PP on prefill": {
			prefill: mk("DeepSeekV3").TP(8).PP(2).Draft(DraftNEXTN).Obj(t), decode: mk("DeepSeekV3").TP(8).Draft(DraftNEXTN).Obj(t)},
		"a draft with PP on decode": {
			prefill: mk("DeepSeekV3").TP(8).Draft(DraftNEXTN).Obj(t), decode: mk("DeepSeekV3").TP(8).PP(2).Draft(DraftNEXTN).Obj(t),
			field: "decode.topology.pipelineParallel", want: "only on prefill servers"},
		"MHA across TP sizes without decode L3": {
			prefill: mk("Qwen3").TP(4).Obj(t), decode: mk("Qwen3").TP(8).Obj(t)},
		"MHA across TP sizes with decode offload writes other heads under one key": {
			prefill: mk("Qwen3").TP(4).Obj(t), decode: mk("Qwen3").TP(8).Obj(t), mode: DecodeL3Offload,
			field: "decode.topology.tensorParallel", want: "tp_size 4 on prefill, 8 on decode"},
		"MHA with one TP size and decode offload": {
			prefill: mk("Qwen3").TP(4).Obj(t), decode: mk("Qwen3").TP(4).Obj(t), mode: DecodeL3Offload},
		"PP differs with decode HiCache": {
			prefill: mk("DeepSeekV3").TP(8).PP(2).Obj(t), decode: mk("DeepSeekV3").TP(8).Obj(t), mode: DecodeL3HiCache,
			field: "decode.topology.pipelineParallel", want: "pp_size 2 on prefill, 1 on decode"},
	} {
		t.Run(name, func(t *testing.T) {
			p, d, pf, df := pair(tc.prefill, tc.decode)
			checkRoleProblem(t, CheckRolePair(p, d, tc.mode, pf, df), tc.field, tc.want)
		})
	}
}

func checkRoleProblem(t *testing.T, err error, field, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var p *RoleProblem
	if !errors.As(err, &p) {
		t.Fatalf("got %v, want a RoleProblem of %s saying %q", err, field, want)
	}
	if p.Field != field || !strings.Contains(p.Message, want) {
		t.Fatalf("got %s: %s\nwant %s: ...%s...", p.Field, p.Message, field, want)
	}
}
