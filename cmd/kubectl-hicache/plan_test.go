package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// planOf runs "plan -o json" on a file and decodes the result.
func planOf(t *testing.T, args ...string) planList {
	t.Helper()
	res := runPlugin(t, "", append([]string{"plan", "-o", "json"}, args...)...).mustSucceed(t)
	var pl planList
	if err := json.Unmarshal([]byte(res.stdout), &pl); err != nil {
		t.Fatalf("plan -o json is not JSON: %v\n%s", err, res.stdout)
	}
	return pl
}

func TestPlanSamples(t *testing.T) {
	// What SGLang's backup rules give for each sample: on a rank-replicated target only
	// attention-TP rank 0 writes, and followers write only rank-sharded sidecar pools.
	cases := map[string]struct {
		ranks, writers, gpus, nodes, gpusPerPod int
		writerPools                             map[int][]string // rank → pools it writes, for some ranks
	}{
		"deepseek_v4": {ranks: 16, writers: 1, gpus: 16, nodes: 2, gpusPerPod: 8,
			writerPools: map[int][]string{0: {"swa"}, 1: nil, 15: nil}},
		"kimi_k2_eagle3": {ranks: 8, writers: 8, gpus: 8, nodes: 1, gpusPerPod: 8,
			writerPools: map[int][]string{0: {"kv", "draft"}, 7: {"draft"}}},
		"qwen3": {ranks: 4, writers: 4, gpus: 4, nodes: 1, gpusPerPod: 4,
			writerPools: map[int][]string{0: {"kv"}, 3: {"kv"}}},
		"qwen3_next": {ranks: 4, writers: 4, gpus: 4, nodes: 1, gpusPerPod: 4,
			writerPools: map[int][]string{0: {"kv", "mamba"}, 3: {"kv", "mamba"}}},
	}
	matches, err := filepath.Glob(filepath.Join(samplesDir, "hicachedeployment_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) != len(cases) {
		t.Errorf("found %d HiCacheDeployment samples, the test knows %d: add the new ones to the table", len(matches), len(cases))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := sample(name)
			pl := planOf(t, "-f", path)
			if len(pl.Deployments) != 1 {
				t.Fatalf("got %d deployments, want 1", len(pl.Deployments))
			}
			got := pl.Deployments[0]
			want := resolveHCD(t, readHCD(t, path))

			if got.Layout.Fingerprint != want.Fingerprint || got.Layout.ShortHash != want.ShortHash || got.Layout.Namespace != want.Namespace {
				t.Errorf("layout = %s / %s / %s, resolve gives %s / %s / %s", got.Layout.Fingerprint, got.Layout.ShortHash,
					got.Layout.Namespace, want.Fingerprint, want.ShortHash, want.Namespace)
			}
			if got.Plan.NumRanks() != tc.ranks || got.Writers != tc.writers {
				t.Errorf("ranks %d, writers %d; want %d, %d", got.Plan.NumRanks(), got.Writers, tc.ranks, tc.writers)
			}
			writing := 0
			for _, r := range got.Plan.Ranks() {
				if len(r.Writes) > 0 {
					writing++
				}
			}
			if writing != tc.writers {
				t.Errorf("%d ranks have writes in the plan, writers says %d", writing, tc.writers)
			}
			for rank, pools := range tc.writerPools {
				var gotPools []string
				for _, p := range got.Plan.Rank(rank).WritePools() {
					gotPools = append(gotPools, string(p))
				}
				if len(pools) == 0 && len(gotPools) != 0 || len(pools) > 0 && !hasAll(gotPools, pools) {
					t.Errorf("rank %d writes %v, want %v", rank, gotPools, pools)
				}
			}
			g := got.Group
			if g.GPUs != tc.gpus || g.Nodes != tc.nodes || g.GPUsPerPod != tc.gpusPerPod {
				t.Errorf("group = %d GPUs, %d nodes, %d per pod; want %d, %d, %d", g.GPUs, g.Nodes, g.GPUsPerPod, tc.gpus, tc.nodes, tc.gpusPerPod)
			}
			var facts []string
			for _, f := range got.Layout.Facts {
				facts = append(facts, f.Name+"="+f.Value)
			}
			if diff := cmp.Diff(want.FactList(), facts); diff != "" {
				t.Errorf("facts differ from resolve (-resolve +plan):\n%s", diff)
			}

			// The table shows the same decisions in words.
			table := runPlugin(t, "", "plan", "-f", path).mustSucceed(t).stdout
			for _, s := range []string{want.Namespace, want.Fingerprint, want.Plan.Summary(), "RANK", "WRITES"} {
				if !strings.Contains(table, s) {
					t.Errorf("table output lacks %q:\n%s", s, table)
				}
			}
		})
	}
}

func hasAll(got, want []string) bool {
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}

// The DeepSeek-V4 sample: exactly one writer rank and 15 ranks with no duties.
func TestPlanDeepSeekV4FollowersHaveNoDuties(t *testing.T) {
	pl := planOf(t, "-f", sample("deepseek_v4"))
	ranks := pl.Deployments[0].Plan.Ranks()
	var writers, idle []int
	for _, r := range ranks {
		if r.HasDuties() {
			writers = append(writers, r.GlobalRank)
		} else {
			idle = append(idle, r.GlobalRank)
		}
	}
	if diff := cmp.Diff([]int{0}, writers); diff != "" {
		t.Errorf("writer ranks (-want +got):\n%s", diff)
	}
	if len(idle) != 15 {
		t.Errorf("%d ranks without duties, want 15", len(idle))
	}
	if d := pl.Deployments[0].Draft; !strings.Contains(d, "DSPARK") || !strings.Contains(d, "packed") {
		t.Errorf("draft = %q, want the packed DSPARK draft", d)
	}
}

// The table output of two samples is pinned by golden files; run with -update to rewrite them.
func TestPlanGolden(t *testing.T) {
	for _, name := range []string{"deepseek_v4", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			got := runPlugin(t, "", "plan", "-f", sample(name)).mustSucceed(t).stdout
			testutil.CompareGolden(t, filepath.Join("testdata", "plan_"+name+".golden"), []byte(got), *update)
		})
	}
}

func TestPlanOutputFormatsAgree(t *testing.T) {
	path := sample("qwen3")
	js := planOf(t, "-f", path)
	res := runPlugin(t, "", "plan", "-f", path, "-o", "yaml").mustSucceed(t)
	var ys planList
	if err := yaml.Unmarshal([]byte(res.stdout), &ys); err != nil {
		t.Fatalf("plan -o yaml is not YAML: %v", err)
	}
	if diff := cmp.Diff(js, ys); diff != "" {
		t.Errorf("yaml and json outputs differ (-json +yaml):\n%s", diff)
	}
}

// A multi-document file plans every HiCacheDeployment in it and skips other kinds; standard
// input works the same as a file.
func TestPlanMultiDocumentAndStdin(t *testing.T) {
	var docs []string
	for _, f := range []string{"cachebackend_managed.yaml", "hicachedeployment_qwen3.yaml", "hicachedeployment_deepseek_v4.yaml"} {
		b, err := os.ReadFile(filepath.Join(samplesDir, f))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	stream := strings.Join(docs, "\n---\n") + "\n---\n# trailing empty document\n"

	fromFile := planOf(t, "-f", writeFile(t, "all.yaml", stream))
	res := runPlugin(t, stream, "plan", "-f", "-", "-o", "json").mustSucceed(t)
	var fromStdin planList
	if err := json.Unmarshal([]byte(res.stdout), &fromStdin); err != nil {
		t.Fatal(err)
	}
	var names, stdinNames []string
	for i := range fromFile.Deployments {
		names = append(names, fromFile.Deployments[i].Name)
	}
	for i := range fromStdin.Deployments {
		stdinNames = append(stdinNames, fromStdin.Deployments[i].Name)
	}
	if diff := cmp.Diff([]string{"qwen3", "deepseek-v4"}, names); diff != "" {
		t.Errorf("planned deployments (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(names, stdinNames); diff != "" {
		t.Errorf("stdin planned other deployments than the file (-file +stdin):\n%s", diff)
	}
	if len(fromStdin.Deployments) == 2 && fromStdin.Deployments[1].Source != "<stdin> (document 3)" {
		t.Errorf("source = %q, want the document named", fromStdin.Deployments[1].Source)
	}
	for i, d := range fromFile.Deployments {
		want := resolveHCD(t, readHCD(t, sample(map[string]string{"qwen3": "qwen3", "deepseek-v4": "deepseek_v4"}[d.Name])))
		if d.Layout.Fingerprint != want.Fingerprint {
			t.Errorf("deployment %d (%s): fingerprint %s, want %s", i, d.Name, d.Layout.Fingerprint, want.Fingerprint)
		}
	}
}

// A List, as "kubectl get hcd -o yaml" prints it, is read item by item.
func TestPlanList(t *testing.T) {
	a, b := readHCD(t, sample("qwen3")), readHCD(t, sample("qwen3_next"))
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{a, b}}
	y, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	pl := planOf(t, "-f", writeFile(t, "list.yaml", string(y)))
	if len(pl.Deployments) != 2 || pl.Deployments[1].Layout.Namespace != "qwen3-next" {
		t.Fatalf("got %+v, want both items, the second in its Fixed namespace", pl.Deployments)
	}
}

// Defaults are those of the CRD: a spec without topology is one GPU on one node.
func TestPlanAppliesDefaults(t *testing.T) {
	path := writeFile(t, "min.yaml", `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: tiny}
spec:
  model: {path: Qwen/Qwen3-0.6B, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: Qwen3
  storage: {backendRef: {name: mooncake}}
`)
	d := planOf(t, "-f", path).Deployments[0]
	want := groupShape{GPUs: 1, Nodes: 1, GPUsPerPod: 1, Replicas: 1, TensorParallel: 1, PipelineParallel: 1, DataParallel: 1}
	if diff := cmp.Diff(want, d.Group); diff != "" {
		t.Errorf("group (-want +got):\n%s", diff)
	}
	if d.Storage == nil || d.Storage.NamespaceStrategy != "LayoutHash" || d.Storage.FlushPolicy != "Auto" || d.Storage.Protocol != "tcp" {
		t.Errorf("storage = %+v, want the CRD defaults LayoutHash, Auto, tcp", d.Storage)
	}
}

// DSpark with pipelineParallel 2 and no prefill role, which SGLang refuses at start, is refused
// by plan with the field to change (it was a plan warning before the resolver mirrored SGLang's
// check).
func TestPlanRefusesWhatSGLangRefuses(t *testing.T) {
	hcd := edit(t, "deepseek_v4").Obj()
	hcd.Spec.Topology.PipelineParallel = 2
	path := writeHCD(t, "pp2.yaml", hcd)
	res := runPlugin(t, "", "plan", "-f", path)
	if res.code == 0 {
		t.Fatalf("plan accepts DSPARK with pipelineParallel 2 without a prefill role:\n%s", res.stdout)
	}
	if !strings.Contains(res.stderr, "spec.topology.pipelineParallel") || !strings.Contains(res.stderr, "only on prefill servers") {
		t.Errorf("plan's refusal does not name the field and the reason:\n%s", res.stderr)
	}
}

func TestPlanSeveralFiles(t *testing.T) {
	pl := planOf(t, "-f", sample("qwen3"), "-f", sample("kimi_k2_eagle3"))
	var names []string
	for _, d := range pl.Deployments {
		names = append(names, d.Name)
	}
	if diff := cmp.Diff([]string{"qwen3", "kimi-k2"}, names); diff != "" {
		t.Errorf("deployments (-want +got):\n%s", diff)
	}
	if res := runPlugin(t, "", "plan", "-f", "-", "-f", "-"); res.code != 1 || !strings.Contains(res.stderr, "standard input can be read only once") {
		t.Errorf("plan -f - -f -: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := runPlugin(t, "", "plan", sample("qwen3")); res.code != 1 || !strings.Contains(res.stderr, "plan takes its files with -f") {
		t.Errorf("plan FILE: exit %d, stderr %q", res.code, res.stderr)
	}
}

// The command line plan shows is the one the pinned SGLang release accepts, for every sample,
// once the kubelet has filled in the node rank and the pod's address.
func TestPlanCommandLineIsAcceptedBySGLang(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	matches, err := filepath.Glob(filepath.Join(samplesDir, "hicachedeployment_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range matches {
		t.Run(filepath.Base(path), func(t *testing.T) {
			d := planOf(t, "-f", path).Deployments[0]
			prefix := sglang.Command()
			if len(d.Command) <= len(prefix) || !slices.Equal(d.Command[:len(prefix)], prefix) {
				t.Fatalf("command %q does not start with %q", d.Command, prefix)
			}
			args := sglang.ExpandVarRefs(d.Command[len(prefix):], map[string]string{"NODE_RANK": "1", "POD_IP": "10.0.0.1"})
			if err := spec.Validate(args); err != nil {
				t.Errorf("the pinned SGLang release refuses the planned command line: %v", err)
			}
			if d.Storage != nil && !slices.Contains(args, "mooncake") {
				t.Errorf("a deployment with storage plans no mooncake backend: %q", args)
			}
		})
	}
	out := runPlugin(t, "", "plan", "-f", sample("deepseek_v4")).mustSucceed(t).stdout
	for _, want := range []string{"--tp-size 16", "--nnodes 2", "--speculative-algorithm DSPARK", placeholderMaster} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
}

// plan shows where the weights come from, the hub download the pods will run (a line the pinned
// hub CLI accepts) and the startup budget.
func TestPlanShowsTheWeightsAndTheStartupBudget(t *testing.T) {
	doc := `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: dsv4}
spec:
  model:
    revision: 5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b
    weightsSize: 700Gi
    source: {hub: {repo: deepseek-ai/DeepSeek-V4, tokenSecretRef: {name: hf-token, key: token}}}
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
`
	pl := planOf(t, "-f", writeFile(t, "hub.yaml", doc))
	if len(pl.Deployments) != 1 {
		t.Fatalf("%d deployments planned", len(pl.Deployments))
	}
	d := pl.Deployments[0]
	cli, err := hfcli.Default()
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Validate(d.Download); err != nil {
		t.Errorf("download %q: %v", d.Download, err)
	}
	if !strings.Contains(d.Weights, "hub deepseek-ai/DeepSeek-V4") || !strings.Contains(d.Weights, "Secret hf-token key token") {
		t.Errorf("weights %q", d.Weights)
	}
	if d.StartupSeconds != 5850 || !strings.Contains(d.StartupRule, "spec.model.weightsSize 700Gi") {
		t.Errorf("startup %d s (%s), want 5850 s from spec.model.weightsSize", d.StartupSeconds, d.StartupRule)
	}
	if got, _ := flagAfter(d.Command, "--model-path"); got != "/models/deepseek-ai/DeepSeek-V4" {
		t.Errorf("--model-path %q", got)
	}
	text := runPlugin(t, "", "plan", "-f", writeFile(t, "hub.yaml", doc)).mustSucceed(t).stdout
	for _, want := range []string{"Weights:", "Download:        hf download deepseek-ai/DeepSeek-V4 --revision 5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b", "Startup budget:  5850 s"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan lacks %q:\n%s", want, text)
		}
	}
}

func flagAfter(argv []string, flag string) (string, bool) {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

// An init container filling the directory the weights are read from is refused by plan with
// the resolver's message, which names the field, why and what to do.
func TestPlanRefusesAContainerWritingWhatSGLangReads(t *testing.T) {
	hcd := edit(t, "qwen3").Obj()
	hcd.Spec.Model.Source, hcd.Spec.Model.Path = nil, "/data/qwen3"
	hcd.Spec.Template.Volumes = []corev1.Volume{{Name: "weights", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	hcd.Spec.Template.VolumeMounts = []corev1.VolumeMount{{Name: "weights", MountPath: "/data"}}
	hcd.Spec.Template.InitContainers = []corev1.Container{{Name: "fetch", Image: "s5cmd",
		VolumeMounts: []corev1.VolumeMount{{Name: "weights", MountPath: "/data"}}}}
	res := runPlugin(t, "", "plan", "-f", writeHCD(t, "fetch.yaml", hcd))
	if res.code == 0 {
		t.Fatalf("plan accepts an init container writing the model directory:\n%s", res.stdout)
	}
	for _, want := range []string{"spec.template.initContainers[0].volumeMounts[0]", "which the serving container mounts at /data", "mount it with readOnly: true"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("plan's refusal lacks %q:\n%s", want, res.stderr)
		}
	}

	// Read-only, it is accepted, and the mount is a layout fact plan shows.
	hcd.Spec.Template.InitContainers[0].VolumeMounts[0].ReadOnly = true
	out := runPlugin(t, "", "plan", "-f", writeHCD(t, "check.yaml", hcd)).mustSucceed(t).stdout
	if !strings.Contains(out, "mount./data") && !strings.Contains(out, "mount /data") {
		t.Errorf("plan does not show the mount over the model path as a layout fact:\n%s", out)
	}
}
