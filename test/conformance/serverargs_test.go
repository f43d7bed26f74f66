package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// The GPU of the simulated nodes (localcluster.DefaultGPUProduct), which the command lines are
// checked for: hack/conformance/serverargs.py stubs SGLang's device queries with these facts.
var nodeGPU = map[string]any{
	"name":       strings.ReplaceAll(localcluster.DefaultGPUProduct, "-", " "),
	"memoryGiB":  80,
	"capability": []int{9, 0},
	"count":      8,
}

// modelConfigs maps the model paths of the checked specs to the directory of
// hack/conformance/models holding their architecture's config.json (no weights: SGLang reads
// only the config before it starts processes).
var modelConfigs = map[string]string{
	"deepseek-ai/DeepSeek-V4":           "deepseek-v4",
	"deepseek-ai/DeepSeek-V4-DSpark":    "deepseek-v4-dspark",
	"deepseek-ai/DeepSeek-V3":           "deepseek-v3",
	"moonshotai/Kimi-K2-Instruct":       "kimi-k2",
	"lightseekorg/kimi-k2-eagle3":       "kimi-k2-eagle3",
	"Qwen/Qwen3-32B":                    "qwen3",
	"Qwen/Qwen3-Next-80B-A3B-Instruct":  "qwen3-next",
	"meta-llama/Llama-3.3-70B-Instruct": "llama3",
	// The layout oracle's model sources (internal/controller/hicachedeployment/layout_oracle_gen_test.go): a volume or
	// another repository holding a Qwen3 checkpoint.
	"/data/qwen3":   "qwen3",
	"/models/qwen3": "qwen3",
	"Qwen/Qwen3-8B": "qwen3",
}

// argsCase is one spec: a sample of config/samples or a spec built to reach one of SGLang's
// refusals.
type argsCase struct {
	name string
	yaml []byte
	// mayStopEarly: the operator may refuse it before any SGLang rule applies (a spec of the
	// layout oracle's corpus, not one built to reach SGLang).
	mayStopEarly bool
}

// operatorVerdict is what the operator does with a spec: refuse it at kubectl apply (the CRD's
// schema and CEL rules), in the resolver (InvalidSpec; kubectl hicache plan refuses it too) or
// in the command line's renderer, or render it.
type operatorVerdict struct {
	refused string // the operator's message; "" when it renders the spec
	// lines are the command lines of every role and rank kind, rendered without the resolver's
	// rules that mirror SGLang's checks (resolve.WithoutSGLangRules), so that SGLang
	// can be asked about the specs those rules refuse. Empty when the spec does not reach them.
	lines []namedLine
}

type namedLine struct {
	name string
	args []string
}

// TestSGLangServerArgsAgree renders the command line of every sample and of specs built to reach
// SGLang's refusals, runs each through SGLang's own argument resolution and checks
// (hack/conformance/serverargs.py, one process for all of them), and requires that SGLang accepts
// a spec exactly when the operator does.
func TestSGLangServerArgsAgree(t *testing.T) {
	python := sglangPython(t)
	start := time.Now()
	all := append(sampleCases(t), refusalCases()...)
	all = append(all, layoutOracleCases(t)...)

	verdicts := make([]operatorVerdict, len(all))
	var lines []map[string]any
	owner := map[string]int{}
	unasked := make([]int, len(all))
	for i, c := range all {
		verdicts[i] = judge(t, c)
		for _, l := range verdicts[i].lines {
			if p := unknownModel(l.args); p != "" && c.mayStopEarly {
				// A checkpoint of the oracle's that no config.json stands for: SGLang reads its
				// architecture before any check, so the line cannot be asked.
				t.Logf("%s / %s: %s has no config.json in hack/conformance/models: not asked", c.name, l.name, p)
				unasked[i]++
				continue
			}
			name := c.name + " / " + l.name
			owner[name] = i
			lines = append(lines, map[string]any{"name": name, "args": l.args})
		}
	}
	rendered := time.Since(start)
	answers, seconds := runServerArgs(t, python, lines)
	t.Logf("SGLang's checks: %d command lines of %d specs in one process: import %.1fs, lines %.1fs; whole test %v (rendering %v)",
		len(lines), len(all), seconds["import"], seconds["lines"], time.Since(start).Round(100*time.Millisecond), rendered.Round(time.Millisecond))

	refusedBySGLang := make([]string, len(all))
	accepted, refused := 0, 0
	for name, a := range answers {
		i := owner[name]
		if a.Accepted {
			accepted++
			continue
		}
		refused++
		if refusedBySGLang[i] == "" {
			refusedBySGLang[i] = name + ": " + a.Error
		}
	}
	t.Logf("command lines: %d checked, %d accepted by SGLang, %d refused", len(answers), accepted, refused)

	for i, c := range all {
		v := verdicts[i]
		switch {
		case len(v.lines) > 0 && unasked[i] == len(v.lines):
			t.Logf("%s: none of its command lines could be asked of SGLang", c.name)
		case len(v.lines) == 0 && c.mayStopEarly:
			t.Logf("%s: the operator refuses it before rendering (%s): nothing to ask SGLang", c.name, v.refused)
		case len(v.lines) == 0:
			// The operator refuses it before any SGLang rule applies: nothing to compare.
			t.Errorf("%s: the operator refuses it before rendering (%s): a case here must reach SGLang", c.name, v.refused)
		case v.refused == "" && refusedBySGLang[i] != "":
			t.Errorf("%s: the operator renders it and SGLang refuses it (the pod would crash-loop): %s", c.name, refusedBySGLang[i])
		case v.refused != "" && refusedBySGLang[i] == "":
			t.Errorf("%s: the operator refuses it (%s) but SGLang accepts every command line of it", c.name, v.refused)
		case v.refused != "":
			t.Logf("%s: both refuse.\n  operator: %s\n  SGLang:   %s", c.name, v.refused, refusedBySGLang[i])
		default:
			t.Logf("%s: both accept (%d command lines)", c.name, len(v.lines))
		}
	}
}

// unknownModel is the first model path of a command line that modelConfigs does not know.
func unknownModel(args []string) string {
	for i, a := range args[:max(len(args)-1, 0)] {
		if (a == "--model-path" || a == "--speculative-draft-model-path") && modelConfigs[args[i+1]] == "" {
			return args[i+1]
		}
	}
	return ""
}

// sampleCases are the HiCacheDeployments of config/samples.
func sampleCases(t *testing.T) []argsCase {
	files, err := filepath.Glob(filepath.Join(testutil.SamplesDir(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []argsCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(b, []byte("\n---")) {
			var head struct{ Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if head.Kind == "HiCacheDeployment" {
				out = append(out, argsCase{name: "sample " + filepath.Base(f), yaml: doc})
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d HiCacheDeployment samples in config/samples, want at least 5", len(out))
	}
	return out
}

// layoutOracleSpecs is the FuzzLayoutOracle corpus decoded into specs (internal/controller/hicachedeployment,
// TestLayoutOracleCorpusSpecs keeps it equal to the corpus).
const layoutOracleSpecs = "internal/controller/hicachedeployment/testdata/layout-oracle-specs.golden.json"

// layoutOracleCases are the specs of the FuzzLayoutOracle corpus: every spec the layout oracle
// judges is checked here too. The operator may refuse one of them before rendering (the fuzzer
// also writes specs the CRD refuses): that is no disagreement, and only the specs it renders are
// asked of SGLang.
func layoutOracleCases(t *testing.T) []argsCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mooncaketest.Root(t), layoutOracleSpecs))
	if err != nil {
		t.Fatal(err)
	}
	var specs []struct {
		Name string `json:"name"`
		YAML string `json:"yaml"`
	}
	if err := json.Unmarshal(b, &specs); err != nil {
		t.Fatalf("%s: %v", layoutOracleSpecs, err)
	}
	if len(specs) == 0 {
		t.Fatalf("%s holds no spec", layoutOracleSpecs)
	}
	out := make([]argsCase, 0, len(specs))
	for _, s := range specs {
		out = append(out, argsCase{name: "layout oracle " + s.Name, yaml: []byte(s.YAML), mayStopEarly: true})
	}
	return out
}

// judge is the operator's verdict on a case, and its command lines.
func judge(t *testing.T, c argsCase) operatorVerdict {
	t.Helper()
	js, err := yaml.YAMLToJSON(c.yaml)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	var v operatorVerdict
	// kubectl apply: the CRD's schema, defaults and CEL rules.
	obj := map[string]any{}
	if err := json.Unmarshal(js, &obj); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	val, err := crdvalidation.Default()
	if err != nil {
		t.Fatal(err)
	}
	admitted, errs, err := val.Admit(context.Background(), obj, "default")
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	if len(errs) > 0 {
		u := &unstructured.Unstructured{Object: obj}
		v.refused = "kubectl apply: " + crdvalidation.Invalid(u.GroupVersionKind(), u.GetName(), errs).Error()
	}
	// The object as the API server would store it without the CEL rules: the same defaults.
	hcd := &hicachev1alpha1.HiCacheDeployment{}
	if err := json.Unmarshal(js, hcd); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	hcd.Default()
	if len(errs) == 0 {
		hcd = &hicachev1alpha1.HiCacheDeployment{}
		b, _ := json.Marshal(admitted)
		if err := json.Unmarshal(b, hcd); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	hcd.Namespace, hcd.UID, hcd.Generation = "default", types.UID(hcd.Name+"-uid"), 1

	// The resolver with its rules (what the controller and kubectl hicache plan run).
	if v.refused == "" {
		if _, err := renderAll(hcd, true); err != nil {
			v.refused = "resolver: " + err.Error()
		}
	}
	// The command lines, rendered without the rules that mirror SGLang's checks.
	lines, err := renderAll(hcd, false)
	if err != nil {
		if v.refused == "" {
			t.Fatalf("%s: the resolver accepts it with its rules and refuses it without: %v", c.name, err)
		}
		return v
	}
	v.lines = lines
	return v
}

// renderAll renders the command line of every role of hcd and every rank kind (the leader, node
// rank 0, and a follower, node rank 1, of a group spanning nodes), as the rank pods run them:
// the keys and the node rank are what the kubelet expands the variable references to.
func renderAll(hcd *hicachev1alpha1.HiCacheDeployment, rules bool) ([]namedLine, error) {
	be := &resolve.Backend{Name: "mooncake", RPCAddress: "10.0.0.9:50051", MetadataServer: sglang.DefaultMooncakeMetadataServer, MetricsPort: 9003}
	const leader = "dsv4-0.dsv4.default.svc:20102"
	type server struct {
		role  string
		nodes int
		cfg   func(distInit string) (sglang.ServerConfig, error)
	}
	var servers []server
	if hcd.Spec.Roles == nil {
		resolveFn := resolve.Resolve
		if !rules {
			resolveFn = resolve.WithoutSGLangRules
		}
		r, err := resolveFn(hcd)
		if err != nil {
			return nil, err
		}
		servers = append(servers, server{"server", r.Nodes, func(d string) (sglang.ServerConfig, error) {
			cfg, _, err := resolve.ServerConfig(hcd, r, be, d)
			return cfg, err
		}})
	} else {
		rolesFn := resolve.RolesOf
		if !rules {
			rolesFn = resolve.RolesOfWithoutSGLangRules
		}
		roles, err := rolesFn(hcd)
		if err != nil {
			return nil, err
		}
		for _, rr := range roles.Each() {
			servers = append(servers, server{string(rr.Role), rr.Nodes, func(d string) (sglang.ServerConfig, error) {
				cfg, _, err := resolve.RoleServerConfig(roles, rr, be, d)
				return cfg, err
			}})
		}
	}
	var out []namedLine
	for _, s := range servers {
		distInit := ""
		if s.nodes > 1 {
			distInit = leader
		}
		cfg, err := s.cfg(distInit)
		if err != nil {
			return nil, err
		}
		args, err := sglang.Args(cfg)
		if err != nil {
			return nil, fmt.Errorf("the %s command line: %w", s.role, resolve.SpecError(err))
		}
		ranks := []string{"0"}
		if s.nodes > 1 {
			ranks = append(ranks, "1")
		}
		for _, rank := range ranks {
			expanded := slices.Clone(args)
			for i, a := range expanded {
				a = strings.ReplaceAll(a, "$(NODE_RANK)", rank)
				a = strings.ReplaceAll(a, "$("+resolve.ServerAdminKeyEnv+")", "admin-key")
				a = strings.ReplaceAll(a, "$("+resolve.ServerAPIKeyEnv+")", "api-key")
				expanded[i] = strings.ReplaceAll(a, "$(POD_IP)", "10.0.1.1")
			}
			kind := "leader"
			if rank != "0" {
				kind = "follower"
			}
			out = append(out, namedLine{name: s.role + " " + kind, args: expanded})
		}
	}
	return out, nil
}

// sglangAnswer is serverargs.py's verdict on one command line.
type sglangAnswer struct {
	Name     string `json:"name"`
	Accepted bool   `json:"accepted"`
	Error    string `json:"error"`
}

// runServerArgs runs every command line through hack/conformance/serverargs.py in one process.
func runServerArgs(t *testing.T, python string, lines []map[string]any) (map[string]sglangAnswer, map[string]float64) {
	t.Helper()
	root := mooncaketest.Root(t)
	models := map[string]string{}
	for path, dir := range modelConfigs {
		// A hub id, and the same repository in a mounted source (a claim or a node's directory
		// holding it under its id, as the samples do).
		models[path] = filepath.Join(root, "hack", "conformance", "models", dir)
		models[hicachev1alpha1.ModelMountPath+"/"+path] = models[path]
	}
	for _, l := range lines {
		args := l["args"].([]string)
		for i, a := range args[:len(args)-1] {
			if (a == "--model-path" || a == "--speculative-draft-model-path") && models[args[i+1]] == "" {
				t.Fatalf("%s: %s %s has no config.json in hack/conformance/models: add it to modelConfigs", l["name"], a, args[i+1])
			}
		}
	}
	in, err := json.Marshal(map[string]any{"gpu": nodeGPU, "models": models, "lines": lines})
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(t.TempDir(), "lines.json")
	if err := os.WriteFile(input, in, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join(root, "hack", "conformance", "serverargs.py"), input)
	// Offline: a model path SGLang does not find locally must never become a download.
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "PYTHONUNBUFFERED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("serverargs.py: %v\n%s", err, tailString(stderr.String(), 60))
	}
	answers := map[string]sglangAnswer{}
	var seconds map[string]float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var done struct {
			Done    bool               `json:"done"`
			Seconds map[string]float64 `json:"seconds"`
		}
		if json.Unmarshal(sc.Bytes(), &done) == nil && done.Done {
			seconds = done.Seconds
			continue
		}
		var a sglangAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil || a.Name == "" {
			t.Fatalf("serverargs.py printed %q, not a verdict", sc.Text())
		}
		answers[a.Name] = a
	}
	if seconds == nil || len(answers) != len(lines) {
		t.Fatalf("serverargs.py answered %d of %d command lines%s", len(answers), len(lines), tailString(stderr.String(), 40))
	}
	return answers, seconds
}

func tailString(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return "\n" + strings.Join(l, "\n")
}
