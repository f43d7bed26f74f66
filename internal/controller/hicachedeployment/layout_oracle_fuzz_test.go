package hicachedeployment

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

// oracleCorpusDir holds the inputs of FuzzLayoutOracle: the samples, the known holes and what
// the fuzzer found.
const oracleCorpusDir = "testdata/fuzz/FuzzLayoutOracle"

// oracleOutcome is what the oracle made of one input.
type oracleOutcome struct {
	// skipped is set when either spec is refused (at apply, by the resolver or the renderer) or
	// writes nothing to L3.
	skipped string
	old     *oracleRendering
	new     *oracleRendering
	// findings are every counterexample, excused or not.
	findings []oracleFinding
}

// failures are the findings no known hole excuses.
func (o oracleOutcome) failures() []oracleFinding {
	var out []oracleFinding
	for _, f := range o.findings {
		if len(f.excusedBy) == 0 {
			out = append(out, f)
		}
	}
	return out
}

// runOracle renders and judges the pair data encodes.
func runOracle(data []byte, hook oracleHook) (oracleOutcome, error) {
	old, new, err := decodePair(data)
	if err != nil {
		return oracleOutcome{skipped: err.Error()}, nil
	}
	ra, err := renderForOracle(old, hook)
	if err == nil {
		var rb *oracleRendering
		rb, err = renderForOracle(new, hook)
		if err == nil {
			if len(ra.writers) == 0 || len(rb.writers) == 0 {
				return oracleOutcome{skipped: "a spec writes nothing to L3", old: ra, new: rb}, nil
			}
			for _, r := range []*oracleRendering{ra, rb} {
				if !slices.ContainsFunc(r.writers, func(w writer) bool { return w.startFails == "" }) {
					return oracleOutcome{skipped: "SGLang's parser refuses every writer's command line: " + r.writers[0].startFails, old: ra, new: rb}, nil
				}
			}
			return oracleOutcome{old: ra, new: rb, findings: judgePair(ra, rb)}, nil
		}
	}
	var skip errOracleSkip
	if errors.As(err, &skip) {
		return oracleOutcome{skipped: skip.Error()}, nil
	}
	return oracleOutcome{}, err
}

// checkOracle fails t on an unexcused finding, naming the first differing item and both specs.
func checkOracle(t *testing.T, data []byte, hook oracleHook) oracleOutcome {
	t.Helper()
	out, err := runOracle(data, hook)
	if err != nil {
		t.Fatalf("the oracle could not run: %v", err)
	}
	for _, f := range out.findings {
		if len(f.excusedBy) > 0 {
			t.Logf("known hole (%s): %s", strings.Join(f.excusedBy, "; "), describeFinding(f))
		}
	}
	if fails := out.failures(); len(fails) > 0 {
		t.Fatalf("the L3 namespace does not follow what SGLang runs: %s\n%s", describeFinding(fails[0]), describePair(out.old.hcd, out.new.hcd))
	}
	return out
}

// FuzzLayoutOracle: for random pairs of specs the operator accepts, every difference in what a
// writer of L3 runs that no neutral table names moves it to another namespace (see the doc
// comment of layout_oracle_test.go for what is compared and what is dropped).
func FuzzLayoutOracle(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkOracle(t, data, nil)
	})
}

// oracleCorpus reads every input of oracleCorpusDir, by file name.
func oracleCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(oracleCorpusDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s is not a go test fuzz v1 file", f)
		}
		lit, ok := strings.CutPrefix(lines[1], "[]byte(")
		lit, ok2 := strings.CutSuffix(lit, ")")
		if !ok || !ok2 {
			t.Fatalf("%s: %q is not a []byte value", f, lines[1])
		}
		s, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = []byte(s)
	}
	if len(out) == 0 {
		t.Fatalf("no input under %s", oracleCorpusDir)
	}
	return out
}

// TestLayoutOracleCorpus replays the corpus deterministically: no input may show an unexcused
// counterexample, and enough inputs must be judged (not refused) for the replay to assert
// something.
func TestLayoutOracleCorpus(t *testing.T) {
	corpus := oracleCorpus(t)
	start := time.Now()
	judged, excused := 0, 0
	for _, name := range slicesSorted(corpus) {
		t.Run(name, func(t *testing.T) {
			out := checkOracle(t, corpus[name], nil)
			if out.skipped != "" {
				t.Logf("skipped: %s", out.skipped)
				return
			}
			judged++
			if len(out.findings) > 0 {
				excused++
			}
		})
	}
	t.Logf("%d inputs, %d judged, %d showing only known holes, in %s", len(corpus), judged, excused, time.Since(start).Round(time.Millisecond))
	if judged*2 < len(corpus) {
		t.Errorf("only %d of %d corpus inputs were judged; the rest were refused, so the replay asserts little", judged, len(corpus))
	}
}

// TestLayoutOracleKnownHolesStillOpen: every known hole's seed still shows it, and shows nothing
// else. When a fix closes a hole, this fails: remove the hole from knownHoles.
func TestLayoutOracleKnownHolesStillOpen(t *testing.T) {
	corpus := oracleCorpus(t)
	for _, h := range knownHoles {
		t.Run(h.seed, func(t *testing.T) {
			data, ok := corpus[h.seed]
			if !ok {
				t.Fatalf("the seed %s of known hole %q is not in %s", h.seed, h.name, oracleCorpusDir)
			}
			out := checkOracle(t, data, nil)
			if out.skipped != "" {
				t.Fatalf("the seed of %q is refused: %s", h.name, out.skipped)
			}
			shown := slices.ContainsFunc(out.findings, func(f oracleFinding) bool { return slices.Contains(f.excusedBy, h.name) })
			if !shown {
				t.Errorf("known hole %q (fixed by %s) no longer shows in its seed %s: remove it from knownHoles", h.name, h.fix, h.seed)
			}
		})
	}
}

// TestLayoutOracleDraftCounts: the draft's counts move a writer to another namespace exactly
// where the release's host pools follow them: the steps of a packed EAGLE draft, not those of a
// sidecar draft, nor DSpark's block size and draft tokens.
func TestLayoutOracleDraftCounts(t *testing.T) {
	corpus := oracleCorpus(t)
	for seed, wantMove := range map[string]bool{
		"draft-num-steps-packed":  true,
		"draft-num-steps-sidecar": false,
		"draft-dspark-block-size": false,
	} {
		t.Run(seed, func(t *testing.T) {
			out := checkOracle(t, corpus[seed], nil)
			if out.skipped != "" {
				t.Fatalf("refused: %s", out.skipped)
			}
			moved := out.old.writers[0].identity != out.new.writers[0].identity
			if moved != wantMove {
				t.Errorf("namespace moved = %v (%s -> %s), want %v", moved, out.old.writers[0].identity, out.new.writers[0].identity, wantMove)
			}
		})
	}
}

// TestLayoutOracleEnvClasses: a variable of the serving container is judged by its class in
// internal/sglang/env_vars.txt: neutral keeps the namespace, layout (and a name the table does not
// list) moves it, refused (and an unlisted name with SGLang's or Mooncake's prefix) is refused.
func TestLayoutOracleEnvClasses(t *testing.T) {
	corpus := oracleCorpus(t)
	for seed, want := range map[string]string{
		"env-neutral":          "same",
		"env-layout":           "moved",
		"env-unknown":          "moved",
		"env-refused":          "refused",
		"env-unknown-reserved": "refused",
	} {
		t.Run(seed, func(t *testing.T) {
			out := checkOracle(t, corpus[seed], nil)
			got := "refused"
			if out.skipped == "" {
				got = "same"
				if out.old.writers[0].identity != out.new.writers[0].identity {
					got = "moved"
				}
			} else if !strings.Contains(out.skipped, "env") {
				t.Fatalf("refused, but not for its env: %s", out.skipped)
			}
			if got != want {
				t.Errorf("the new spec's namespace: %s, want %s (%s)", got, want, out.skipped)
			}
		})
	}
}

// TestLayoutOracleFindsRefusedEnv: a variable the table refuses that reaches a writer's pod is a
// finding by itself, whatever the namespaces say.
func TestLayoutOracleFindsRefusedEnv(t *testing.T) {
	name := "ASCEND_VISIBLE_DEVICES"
	if r, err := sglang.EnvRuleOf(name); err != nil || r.Class != sglang.ArgRefused {
		t.Fatalf("%s is no longer refused in env_vars.txt (%v): pick another", name, err)
	}
	out, err := runOracle(oracleCorpus(t)["env-neutral"], nil)
	if err != nil || out.skipped != "" {
		t.Fatalf("the seed does not run: %v %s", err, out.skipped)
	}
	// As if the product had let the variable through: it reaches the new spec's pods.
	for i := range out.new.writers {
		out.new.writers[i].refusedEnv = []string{name}
	}
	found := slices.ContainsFunc(judgePair(out.old, out.new), func(f oracleFinding) bool { return strings.Contains(f.what, name) })
	if !found {
		t.Errorf("a writer running with the refused %s is no finding", name)
	}
}

// oracleSpecsGolden holds every spec of the corpus, for the conformance suite
// (test/conformance, TestSGLangServerArgsAgree), which runs their command lines through the
// pinned release's own argument checks.
const oracleSpecsGolden = "testdata/layout-oracle-specs.golden.json"

// oracleCorpusSpec is one spec of a corpus input, as kubectl would apply it.
type oracleCorpusSpec struct {
	Name string `json:"name"`
	YAML string `json:"yaml"`
}

// TestLayoutOracleCorpusSpecs keeps oracleSpecsGolden equal to the specs the corpus decodes to
// (run with -update after adding to the corpus or changing the generator).
func TestLayoutOracleCorpusSpecs(t *testing.T) {
	corpus := oracleCorpus(t)
	var out []oracleCorpusSpec
	seen := map[string]bool{}
	for _, name := range slicesSorted(corpus) {
		old, new, err := decodePair(corpus[name])
		if err != nil {
			continue
		}
		for _, s := range []struct {
			side string
			h    *hicachev1alpha1.HiCacheDeployment
		}{{"old", old}, {"new", new}} {
			h := s.h.DeepCopy()
			h.TypeMeta = metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "HiCacheDeployment"}
			h.ObjectMeta = metav1.ObjectMeta{Name: s.h.Name}
			b, err := yaml.Marshal(h)
			if err != nil {
				t.Fatal(err)
			}
			if seen[string(b)] {
				continue
			}
			seen[string(b)] = true
			out = append(out, oracleCorpusSpec{Name: name + " " + s.side, YAML: string(b)})
		}
	}
	if len(out) < len(corpus) {
		t.Fatalf("%d specs from %d corpus inputs: the corpus decodes to too few", len(out), len(corpus))
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, oracleSpecsGolden, append(b, '\n'))
}

// plantNeutral is a hook that makes the product treat a layout flag of the extra arguments as
// neutral: the flag leaves the layout settings and the facts, fingerprint and namespace are
// computed again without it, as they would be had extra_args.txt said neutral.
func plantNeutral(flag string) oracleHook {
	return func(r *resolve.Resolved) {
		if _, ok := r.Settings.ExtraLayoutArgs[flag]; !ok {
			return
		}
		delete(r.Settings.ExtraLayoutArgs, flag)
		derived := strings.HasPrefix(r.Namespace, cache.NamespacePrefixTag)
		r.Facts = cache.Facts(r.Topology, r.Settings)
		r.Fingerprint, r.ShortHash = r.Facts.Fingerprint(), r.Facts.ShortFingerprint()
		if derived {
			r.Namespace = cache.Namespace(r.Facts)
		}
	}
}

// plantedFinds tells whether out shows an unexcused difference of flag.
func plantedFinds(out oracleOutcome, flag string) bool {
	return slices.ContainsFunc(out.failures(), func(f oracleFinding) bool {
		return slices.ContainsFunc(f.all, func(d diffItem) bool { return d.name == "arg "+flag })
	})
}

// TestLayoutOraclePlantedHole: with one layout flag turned neutral in the product, the oracle
// finds a counterexample, in the committed corpus and within a bounded number of random inputs.
func TestLayoutOraclePlantedHole(t *testing.T) {
	const flag = "--attention-backend"
	hook := plantNeutral(flag)

	corpus := oracleCorpus(t)
	found := ""
	for _, name := range slicesSorted(corpus) {
		out, err := runOracle(corpus[name], hook)
		if err != nil {
			t.Fatal(err)
		}
		if plantedFinds(out, flag) {
			found = name
			break
		}
	}
	if found == "" {
		t.Errorf("with %s neutral, no corpus input shows a counterexample", flag)
	} else {
		t.Logf("with %s neutral, corpus input %s shows a counterexample", flag, found)
	}
	// And without the plant, that input passes: the counterexample is the plant's.
	if found != "" {
		if out, err := runOracle(corpus[found], nil); err != nil || len(out.failures()) > 0 {
			t.Errorf("corpus input %s fails without the plant too (%v)", found, err)
		}
	}

	const budget = 3000
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	for i := 1; i <= budget; i++ {
		data := make([]byte, 64)
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		out, err := runOracle(data, hook)
		if err != nil {
			t.Fatal(err)
		}
		if plantedFinds(out, flag) {
			t.Logf("with %s neutral, random input %d of at most %d shows a counterexample (%s)", flag, i, budget, time.Since(start).Round(time.Millisecond))
			return
		}
	}
	t.Errorf("with %s neutral, %d random inputs showed no counterexample", flag, budget)
}

// TestLayoutOraclePlantedMountHole: with the mounts of the serving container left out of the
// layout facts, the oracle finds the claim changed over the model path in its corpus seed; with
// the product as it is, the seed passes.
func TestLayoutOraclePlantedMountHole(t *testing.T) {
	const seed = "layout-volume-over-model-path"
	data, ok := oracleCorpus(t)[seed]
	if !ok {
		t.Fatalf("no seed %s in %s", seed, oracleCorpusDir)
	}
	hook := func(r *resolve.Resolved) {
		derived := strings.HasPrefix(r.Namespace, cache.NamespacePrefixTag)
		r.Settings.LayoutMounts = nil
		r.Facts = cache.Facts(r.Topology, r.Settings)
		r.Fingerprint, r.ShortHash = r.Facts.Fingerprint(), r.Facts.ShortFingerprint()
		if derived {
			r.Namespace = cache.Namespace(r.Facts)
		}
	}
	out, err := runOracle(data, hook)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(out.failures(), func(f oracleFinding) bool {
		return slices.ContainsFunc(f.all, func(d diffItem) bool { return d.name == "mount /data" })
	}) {
		t.Errorf("with the mounts out of the layout facts, the oracle finds nothing in %s (skipped: %q)", seed, out.skipped)
	}
	if out, err := runOracle(data, nil); err != nil || out.skipped != "" || len(out.findings) > 0 {
		t.Errorf("%s without the plant: %v, skipped %q, findings %v", seed, err, out.skipped, out.findings)
	}
}

// TestKubeletExpand holds kubeletExpand to the kubelet's rules for $(VAR) in command, args and
// env values.
func TestKubeletExpand(t *testing.T) {
	env := map[string]string{"A": "x", "B": "$(A)", "EMPTY": ""}
	for in, want := range map[string]string{
		"$(A)":       "x",
		"a$(A)b":     "axb",
		"$$(A)":      "$(A)",
		"$$$(A)":     "$x",
		"$(MISSING)": "$(MISSING)",
		"$(A":        "$(A",
		"$(A$(A)":    "$(A$(A)",
		"$A":         "$A",
		"$":          "$",
		"a$":         "a$",
		"$(B)":       "$(A)", // a value is not expanded again
		"$(EMPTY)z":  "z",
		"$()":        "$()",
		"$(A)$(A)":   "xx",
		"$$":         "$",
		"$(a b)":     "$(a b)",
	} {
		if got := kubeletExpand(in, env); got != want {
			t.Errorf("kubeletExpand(%q) = %q, want %q", in, got, want)
		}
	}
}

func slicesSorted(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// BenchmarkLayoutOracle is the cost of one random input (both specs admitted, resolved, rendered
// and judged, or refused), with the share of inputs judged.
func BenchmarkLayoutOracle(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	judged := 0
	for b.Loop() {
		data := make([]byte, 64)
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		out, err := runOracle(data, nil)
		if err != nil {
			b.Fatal(err)
		}
		if out.skipped == "" {
			judged++
		}
	}
	b.ReportMetric(float64(judged)/float64(b.N), "judged/op")
}

// BenchmarkLayoutOracleCorpus is the cost of replaying the committed corpus once.
func BenchmarkLayoutOracleCorpus(b *testing.B) {
	corpus := oracleCorpus(b)
	for b.Loop() {
		for _, data := range corpus {
			if _, err := runOracle(data, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
