package sglang

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// EnvRule is the class of one environment variable, with the reason for it. The classes are
// those of extra arguments (ArgClass).
type EnvRule struct {
	Name  string
	Class ArgClass
	// Field is the spec field to set instead, for a refused variable the spec has a field for.
	Field string
	// Reason says why: for a refused variable the end of "spec.template.env[i] sets <NAME>,
	// which ..."; optional for a neutral one.
	Reason string
}

//go:embed env_vars.txt
var embeddedEnvRules []byte

var defaultEnvRules = sync.OnceValues(func() (map[string]EnvRule, error) { return ParseEnvRules(embeddedEnvRules) })

// EnvRules returns the classes of the pinned releases' environment variables, keyed by name,
// parsed once from the embedded env_vars.txt.
func EnvRules() (map[string]EnvRule, error) { return defaultEnvRules() }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseEnvRules reads a classification in the env_vars.txt format: one line per variable,
// "<NAME> <class> [<field>] [<reason>]", as ParseArgRules reads extra_args.txt.
func ParseEnvRules(data []byte) (map[string]EnvRule, error) {
	lines, err := parseClassTable(data, "NAME", "a variable name", envName.MatchString)
	if err != nil {
		return nil, err
	}
	rules := make(map[string]EnvRule, len(lines))
	for name, l := range lines {
		rules[name] = EnvRule{Name: name, Class: l.Class, Field: l.Field, Reason: l.Reason}
	}
	return rules, nil
}

// UnclassifiedEnv compares a release's variable table with a classification: missing are
// variables of the table that have no rule, stale are rules for variables it does not list.
func UnclassifiedEnv(table *argspec.EnvTable, rules map[string]EnvRule) (missing, stale []string) {
	known := map[string]bool{}
	for _, v := range table.Variables {
		known[v.Name] = true
		if _, ok := rules[v.Name]; !ok {
			missing = append(missing, v.Name)
		}
	}
	for n := range rules {
		if !known[n] {
			stale = append(stale, n)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	return missing, stale
}

// ReservedEnvPrefixes are the prefixes of SGLang's and Mooncake's own variables: a name with
// one of them that the table does not list is refused, since a release may read it.
var ReservedEnvPrefixes = []string{"SGLANG_", "SGL_", "MC_", "MOONCAKE_"}

// HowToClassifyEnv says how to add a variable to the classification.
const HowToClassifyEnv = "run hack/sglang-env.sh to list what the pinned release reads, then classify it in internal/sglang/env_vars.txt"

// EnvRuleOf is the rule of one variable set in the serving container:
//   - a variable of the table, by its line in env_vars.txt;
//   - an unlisted name with SGLang's or Mooncake's prefixes: refused, since the table may be
//     stale or the release may read it through a name the extractor cannot see;
//   - any other name: layout. Only SGLang's process (with the libraries it imports: torch,
//     NCCL, Triton, transformers, huggingface_hub, ...) reads the serving container's
//     environment, and the operator cannot tell a user's own variable from one of those
//     libraries' (TORCH_*, NCCL_ALGO, HF_HUB_*, CUDA_*, TRANSFORMERS_*), several of which change
//     the computed bytes. A layout fact is the safe answer: a change moves to a new namespace.
func EnvRuleOf(name string) (EnvRule, error) {
	rules, err := EnvRules()
	if err != nil {
		return EnvRule{}, fmt.Errorf("loading the classification of environment variables: %w", err)
	}
	if r, ok := rules[name]; ok {
		return r, nil
	}
	for _, p := range ReservedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			table, err := argspec.DefaultEnv()
			version := "the pinned release"
			if err == nil {
				version = fmt.Sprintf("sglang %s and mooncake %s", table.SGLangVersion, table.MooncakeVersion)
			}
			return EnvRule{Name: name, Class: ArgRefused, Reason: fmt.Sprintf(
				"has the prefix %s of SGLang's and Mooncake's own variables but is not one %s reads as far as the operator knows (a misspelling, or a newer release's): check the name; to use it, %s",
				p, version, HowToClassifyEnv)}, nil
		}
	}
	return EnvRule{Name: name, Class: ArgLayout, Reason: "is not a variable SGLang or Mooncake read, but a library of the serving process may read it, so it is taken as a layout fact"}, nil
}

// EnvDefault is the pinned releases' default of a variable, when every read gives one literal.
func EnvDefault(name string) (string, bool) {
	table, err := argspec.DefaultEnv()
	if err != nil {
		return "", false
	}
	v, ok := table.Lookup(name)
	if !ok {
		return "", false
	}
	return v.Default()
}
