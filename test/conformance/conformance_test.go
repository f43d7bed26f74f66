// Package conformance runs SGLang's own HiCache storage code (the pinned release, from
// bin/sglang-venv) against a real mooncake_master, configured exactly as the operator renders
// each rank, and checks that what SGLang writes is what the operator's cache model predicts and
// what its namespace flush removes.
//
// For each case one process per writing rank (hack/conformance/rank.py) parses the rank's
// rendered command line with SGLang's parser, runs with the rendered MOONCAKE_* environment,
// builds SGLang's host pools on CPU for a tiny model of the architecture, creates the backend
// through SGLang's StorageBackendFactory and backs up two chained pages through the cache
// controller's own backup thread. A case with followers that write nothing also runs one of
// them, to see the backup thread skip it. The suite then checks the master's keys against
// internal/cache, the namespace, SGLang's read path, the segment each rank mounted, the
// operator's flush script and SGLang's batch_exists afterwards. docs/compatibility.md describes
// what this proves and what it does not.
package conformance

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// segmentPerRank is the memory each rank lends to the store in every case.
const segmentPerRank = "32Mi"

// pageSize is the page size of every case, in tokens.
const pageSize = 4

// warmupKey is the object SGLang's MooncakeStore puts (and leaves) at setup, outside any
// namespace: "sglang_mooncake_store_warmup_key" + a random UUID in hex.
var warmupKey = regexp.MustCompile(`^sglang_mooncake_store_warmup_key[0-9a-f]{32}$`)

type conformanceCase struct {
	hcd *hicachev1alpha1.HiCacheDeployment
}

func cases() map[string]conformanceCase {
	hcd := func(name string) *testutil.HCDBuilder {
		return testutil.HCD(name).Storage("mooncake").Segment(segmentPerRank).PageSize(pageSize)
	}
	return map[string]conformanceCase{
		// Every rank writes its own kv shard.
		"MHA TP4":     {hcd("llama-tp4").Profile("Llama3").TP(4).Obj()},
		"MHA TP2 PP2": {hcd("llama-tp2pp2").Profile("Llama3").TP(2).PP(2).Obj()},
		// Only TP0 of each stage writes the replicated DeepSeek-V4 pools; followers write nothing.
		"DeepSeekV4 TP16":    {hcd("dsv4-tp16").Profile("DeepSeekV4").TP(16).Obj()},
		"DeepSeekV4 TP8 PP2": {hcd("dsv4-tp8pp2").Profile("DeepSeekV4").TP(8).PP(2).Obj()},
		// Hybrid Mamba: over MHA every rank writes kv and mamba shards; over MLA followers write
		// their mamba shard only.
		"Qwen3Next TP2": {hcd("qwen3next-tp2").Profile("Qwen3Next").TP(2).Obj()},
		"KimiK3 TP2":    {hcd("kimik3-tp2").Profile("KimiK3").TP(2).Obj()},
		// An EAGLE3 draft with an MHA host pool on an MLA target: followers write their draft shard.
		"DeepSeekV3 EAGLE3 TP2": {hcd("dsv3-eagle3-tp2").Profile("DeepSeekV3").TP(2).Draft("EAGLE3").Obj()},
	}
}

func TestSGLangStorageConformance(t *testing.T) {
	python := sglangPython(t)
	flushPython := mooncaketest.Python(t)
	start := time.Now()
	t.Cleanup(func() { t.Logf("conformance suite: %v", time.Since(start).Round(time.Second)) })
	for name, tc := range cases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runCase(t, python, flushPython, tc)
		})
	}
}

// rankRef is one rank of the plan.
type rankRef struct{ tp, pp, global int }

// rankRun is one rank process's report.
type rankRun struct {
	name   string
	report rankReport
}

func runCase(t *testing.T, python, flushPython string, tc conformanceCase) {
	ctx := context.Background()
	r, err := resolve.Resolve(tc.hcd)
	if err != nil {
		t.Fatal(err)
	}
	m := mooncaketest.Start(t)
	admin, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(m.AdminURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, _ := strconv.Atoi(port)

	// What the operator renders for the ranks of group 0.
	be := &resolve.Backend{Name: "mooncake", RPCAddress: m.RPCAddr, MetadataServer: sglang.DefaultMooncakeMetadataServer, MetricsPort: metricsPort}
	distInit := ""
	if r.Nodes > 1 {
		distInit = "127.0.0.1:20102"
	}
	cfg, mc, err := resolve.ServerConfig(tc.hcd, r, be, distInit)
	if err != nil {
		t.Fatal(err)
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		t.Fatal(err)
	}
	envVars, err := sglang.Env(*mc)
	if err != nil {
		t.Fatal(err)
	}
	served := resolve.ServedModelName(&tc.hcd.Spec)
	prefix := cache.NamespacePrefix(r.Namespace, served)

	// The processes: every rank with duties, and one follower without (if there is one).
	var all, procs []rankRef
	follower := false
	for _, rk := range r.Plan.Ranks() {
		ref := rankRef{tp: rk.TPRank, pp: rk.PPRank, global: rk.GlobalRank}
		all = append(all, ref)
		if rk.HasDuties() {
			procs = append(procs, ref)
		}
	}
	for i := r.Plan.NumRanks() - 1; i >= 0; i-- {
		if !r.Plan.Rank(i).HasDuties() {
			rk := r.Plan.Rank(i)
			procs = append(procs, rankRef{tp: rk.TPRank, pp: rk.PPRank, global: rk.GlobalRank})
			follower = true
			break
		}
	}
	dutyRanks := make([][2]int, len(all))
	for i, a := range all {
		dutyRanks[i] = [2]int{a.tp, a.pp}
	}
	pages := [][]int{{101, 102, 103, 104}, {105, 106, 107, 108}}
	topo := r.Topology
	in := caseInput{Attention: string(topo.Attention), MambaConvBuffers: topo.MambaConvBuffers, Pages: pages, DutyRanks: dutyRanks}
	for _, p := range topo.Pools {
		in.Pools = append(in.Pools, string(p))
	}
	if topo.Draft.Placement == cache.DraftPlacementSidecar {
		in.Draft = &draftInput{HostPool: string(topo.Draft.HostPoolKind)}
		for _, p := range topo.Draft.Pools {
			in.Draft.Pools = append(in.Draft.Pools, string(p))
		}
	}
	for _, ref := range procs {
		// The kubelet expands $(NODE_RANK) from the pod's index and $(POD_IP) from its address.
		in.Ranks = append(in.Ranks, rankInput{TPRank: ref.tp, PPRank: ref.pp,
			Args: expand(args, map[string]string{"NODE_RANK": strconv.Itoa(ref.global / r.GPUsPerPod)})})
	}
	env := make([]string, 0, len(envVars))
	for _, e := range envVars {
		env = append(env, e.Name+"="+expand([]string{e.Value}, map[string]string{"POD_IP": "127.0.0.1"})[0])
	}
	proc := startCase(t, python, in, env)
	running := make([]*rankRun, len(procs))
	pids := map[int]bool{proc.cmd.Process.Pid: true}
	for i, rep := range proc.reports {
		running[i] = &rankRun{name: fmt.Sprintf("rank tp%d pp%d", procs[i].tp, procs[i].pp), report: rep}
		if rep.TPRank != procs[i].tp || rep.PPRank != procs[i].pp {
			t.Fatalf("report %d is of tp%d pp%d, want %s", i, rep.TPRank, rep.PPRank, running[i].name)
		}
		if pids[rep.PID] {
			t.Fatalf("%s ran in process %d, which is not a process of its own", running[i].name, rep.PID)
		}
		pids[rep.PID] = true
	}

	// 1. Every process computed the same page hashes with SGLang's get_hash_str.
	hashes := running[0].report.PageHashes
	for _, p := range running {
		if !slices.Equal(p.report.PageHashes, hashes) {
			t.Fatalf("%s hashed the pages to %v, %s to %v", p.name, p.report.PageHashes, running[0].name, hashes)
		}
	}
	for _, h := range hashes {
		if !cache.IsPageHash(h) {
			t.Fatalf("SGLang's page hash %q is not the 64-hex-digit hash internal/cache expects", h)
		}
	}

	// 2. SGLang's duty decision (backup_skip, should_backup) agrees with the plan for every rank.
	for _, p := range running {
		for i, rk := range r.Plan.Ranks() {
			got, ok := p.report.Duties[fmt.Sprintf("%d/%d", all[i].tp, all[i].pp)]
			if !ok {
				t.Fatalf("%s reported no duty for tp%d pp%d", p.name, all[i].tp, all[i].pp)
			}
			var want []string
			for _, pool := range rk.WritePools() {
				want = append(want, string(pool))
			}
			if diff := cmp.Diff(sorted(want), sorted(got.Writes)); diff != "" {
				t.Errorf("rank tp%d pp%d: SGLang backs up other pools than the plan (-plan +SGLang):\n%s", all[i].tp, all[i].pp, diff)
			}
		}
	}

	// 3. Each process backed up its pages (or skipped them as a follower) and reads back what it
	// wrote, byte for byte.
	for i, p := range running {
		rk := planRank(r.Plan, procs[i])
		if want := []int{pageSize, pageSize}; rk.HasDuties() && !slices.Equal(p.report.CompletedTokens, want) {
			t.Errorf("%s: backup completed %v tokens, want %v", p.name, p.report.CompletedTokens, want)
		}
		for _, pool := range rk.WritePools() {
			if pool == cache.PoolKV && topo.Attention == cache.AttentionDSV4 {
				continue
			}
			rb, ok := p.report.Readback[string(pool)]
			switch {
			case !ok:
				t.Errorf("%s: no read-back of pool %s", p.name, pool)
			case !rb.BytesEqual || !slices.Equal(rb.OK, []bool{true, true}) || rb.Objects == 0:
				t.Errorf("%s: pool %s read back %+v, want every page read and equal bytes", p.name, pool, rb)
			}
		}
	}

	// 4. The segment each rank mounted is the memory spec.storage.globalSegmentSize says it lends.
	segs, err := admin.Segments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perRank := resource.MustParse(segmentPerRank)
	if len(segs) != len(running) {
		t.Errorf("the master lists %d segments, want one per rank process (%d): %+v", len(segs), len(running), segs)
	}
	for _, s := range segs {
		if s.SizeBytes != perRank.Value() {
			t.Errorf("segment %s is %d bytes; spec.storage.globalSegmentSize %s promises %d bytes per rank (rendered global_segment_size %v at tp %d × pp %d)",
				s.Name, s.SizeBytes, segmentPerRank, perRank.Value(), cfg.HiCache.ExtraConfig["global_segment_size"], topo.TensorParallel, topo.PipelineParallel)
		}
	}

	// 5. The keys on the master are, key for key, what internal/cache predicts, plus one warmup key
	// per process; every page key is inside the deployment's namespace.
	var want []string
	for _, h := range hashes {
		want = append(want, cache.KeysForPage(r.Plan, prefix, h)...)
	}
	want = sorted(want)
	pageKeys, warmups := listKeys(t, admin)
	if diff := cmp.Diff(want, pageKeys); diff != "" {
		t.Errorf("keys on the master differ from internal/cache's prediction for namespace %q (-predicted +SGLang wrote):\n%s", prefix, diff)
	}
	if len(warmups) != len(running) {
		t.Errorf("%d warmup keys, want one per rank process (%d): %v", len(warmups), len(running), warmups)
	}
	for _, k := range pageKeys {
		if !cache.KeyInNamespace(k, prefix) {
			t.Errorf("key %q is outside the deployment's namespace %q", k, prefix)
		}
	}
	if follower {
		// The follower's process ran the same backup thread: had it written, its rank would show in
		// a key above (its suffixes are its own); here we check it acknowledged with nothing done.
		f := running[len(running)-1]
		if got := f.report.CompletedTokens; !slices.Equal(got, []int{0, 0}) {
			t.Errorf("%s (a follower without duties) reports %v completed tokens, want [0 0]: the backup thread skips it", f.name, got)
		}
	}

	// 6. SGLang's existence queries find every page on every rank (every rank reads).
	for i, ex := range proc.exists(t) {
		for pool, n := range ex {
			if n != len(pages) {
				t.Errorf("%s: before the flush, SGLang finds %d of %d pages of %s", running[i].name, n, len(pages), pool)
			}
		}
	}

	// 7. Another namespace with the same model, page hashes and suffixes survives the flush.
	otherPrefix := cache.NamespacePrefix("hc-other", served)
	other := make([]string, len(want))
	for i, k := range want {
		other[i] = otherPrefix + strings.TrimPrefix(k, prefix)
	}
	m.PutKeys(t, other, 64)

	// 8. The operator's namespace flush, run the way its LocalFlusher runs it, removes exactly the
	// namespace: not the other namespace, not the warmup keys, and never counts them as left.
	res, done, err := cacheflush.LocalFlusher{Python: flushPython}.FlushNamespace(ctx, storeuse.NamespaceFlushRequest{
		Endpoints: hicachev1alpha1.BackendEndpoints{RPCAddress: m.RPCAddr, AdminURL: m.AdminURL},
		Prefix:    r.Namespace + "_", Force: true,
	})
	if err != nil || !done {
		t.Fatalf("flush: done %v, %v", done, err)
	}
	if res.Removed != int64(len(want)) || res.Left == nil || *res.Left != 0 {
		t.Errorf("flush removed %d and left %v; want %d removed and 0 left", res.Removed, res.Left, len(want))
	}
	after, warmupsAfter := listKeys(t, admin)
	if diff := cmp.Diff(sorted(other), after); diff != "" {
		t.Errorf("after the flush the master holds other keys than the other namespace's (-want +got):\n%s", diff)
	}
	if !slices.Equal(warmupsAfter, warmups) {
		t.Errorf("the flush touched the warmup keys: %v before, %v after", warmups, warmupsAfter)
	}

	// 9. SGLang's own batch_exists finds nothing any more.
	for i, ex := range proc.exists(t) {
		for pool, n := range ex {
			if n != 0 {
				t.Errorf("%s: after the flush, SGLang still finds %d pages of %s", running[i].name, n, pool)
			}
		}
	}
}

func planRank(p cache.RankPlan, ref rankRef) cache.RankDuty {
	for _, r := range p.Ranks() {
		if r.GlobalRank == ref.global {
			return r
		}
	}
	return cache.RankDuty{}
}

// listKeys returns the master's keys, sorted: the page keys and SGLang's warmup keys apart.
func listKeys(t *testing.T, admin *mooncake.Client) (pageKeys, warmups []string) {
	t.Helper()
	pageKeys, warmups = []string{}, []string{}
	err := admin.Keys(context.Background(), func(k string) error {
		if warmupKey.MatchString(k) {
			warmups = append(warmups, k)
		} else {
			pageKeys = append(pageKeys, k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sorted(pageKeys), sorted(warmups)
}

// expand replaces $(NAME) references the way the kubelet does in args and env values.
func expand(in []string, vars map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "$("+k+")", v)
		}
		out[i] = s
	}
	return out
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}
