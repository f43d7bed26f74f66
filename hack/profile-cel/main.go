// Command profile-cel writes the built-in profiles' tables (internal/cache/profiles.go) into the
// CEL rules and the enum of api/v1alpha1, so that the API server refuses exactly what the
// resolver refuses, from one source. It rewrites, in the file it is given, every map literal
// indexed by the profile ("{'DeepSeekV3': ...}[self.profile]") in a marker line it knows by the
// rule's message, and the Profile enum; a profile-indexed map in a rule it does not know is an
// error, so a new rule cannot restate the profiles by hand.
//
//	go run ./hack/profile-cel api/v1alpha1/hicachedeployment_types.go
package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/hicache-io/hicache-operator/internal/cache"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: profile-cel FILE")
		os.Exit(2)
	}
	in, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := Rewrite(in, Tables())
	if err != nil {
		fmt.Fprintf(os.Stderr, "profile-cel: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if !bytes.Equal(in, out) {
		if err := os.WriteFile(os.Args[1], out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// Table is one profile-indexed map of the CEL rules: its value per profile, and a fragment of
// the message of the rule it stands in, which names the rule.
type Table struct {
	Message string
	Value   func(cache.Profile) any // []string or string
}

// Tables are the tables the rules use, derived from the profiles.
func Tables() []Table {
	placed := func(pl cache.DraftPlacement) func(cache.Profile) any {
		return func(p cache.Profile) any {
			var out []string
			for _, a := range p.DraftAlgorithms() {
				if p.Drafts[a].Placement == pl {
					out = append(out, string(a))
				}
			}
			return out
		}
	}
	return []Table{
		{
			// The attention kinds the profile's pools fit: those the resolver accepts with the
			// profile's pools and nothing else set.
			Message: "spec.topology.attention does not fit the pools of spec.profile",
			Value: func(p cache.Profile) any {
				var out []string
				for _, a := range cache.AttentionKinds() {
					if _, err := cache.ResolveTopology(p.Name, cache.Topology{Attention: a, TensorParallel: 1, Backend: cache.BackendMooncake}); err == nil {
						out = append(out, string(a))
					}
				}
				return out
			},
		},
		{
			Message: "spec.profile has no built-in layout for this algorithm",
			Value: func(p cache.Profile) any {
				var out []string
				for _, a := range p.DraftAlgorithms() {
					out = append(out, string(a))
				}
				return out
			},
		},
		{Message: "spec.topology.draft.modelPath is required", Value: placed(cache.DraftPlacementSidecar)},
		{Message: "spec.topology.draft.hostPool is for a sidecar draft", Value: placed(cache.DraftPlacementPacked)},
		{Message: "spec.topology.draft.hostPool MLA needs a rank-replicated target", Value: func(p cache.Profile) any { return string(p.Attention) }},
	}
}

var (
	profileMap = regexp.MustCompile(`\{'[^{}]*\}\[self\.profile\]`)
	enumLine   = regexp.MustCompile(`(?m)^(// \+kubebuilder:validation:Enum=)([A-Za-z0-9;]*)\n(type Profile string)`)
	message    = regexp.MustCompile(`message="([^"]*)"`)
)

// Rewrite is src with every table of tables written from the built-in profiles, and the Profile
// enum listing them.
func Rewrite(src []byte, tables []Table) ([]byte, error) {
	names := cache.ProfileNames()
	m := enumLine.FindSubmatch(src)
	if m == nil {
		return nil, fmt.Errorf("no +kubebuilder:validation:Enum line above `type Profile string`")
	}
	src = enumLine.ReplaceAll(src, []byte("${1}"+strings.Join(enumOrder(string(m[2]), names), ";")+"\n${3}"))
	used := make([]bool, len(tables))
	lines := strings.SplitAfter(string(src), "\n")
	for i, l := range lines {
		if !profileMap.MatchString(l) {
			continue
		}
		m := message.FindStringSubmatch(l)
		t := -1
		for j, tb := range tables {
			if m != nil && strings.Contains(m[1], tb.Message) {
				t = j
			}
		}
		if t < 0 {
			return nil, fmt.Errorf("line %d restates the profiles in a rule hack/profile-cel does not know; add its table there: %.120s", i+1, l)
		}
		if n := len(profileMap.FindAllString(l, -1)); n != 1 {
			return nil, fmt.Errorf("line %d has %d profile-indexed maps, and hack/profile-cel writes one per rule", i+1, n)
		}
		used[t] = true
		lines[i] = profileMap.ReplaceAllLiteralString(l, celMap(names, tables[t].Value)+"[self.profile]")
	}
	for j, u := range used {
		if !u {
			return nil, fmt.Errorf("no rule with the message %q holds a profile-indexed map", tables[j].Message)
		}
	}
	return []byte(strings.Join(lines, "")), nil
}

// enumOrder is the profiles names in the enum's order: those the enum (old, ";"-separated)
// already lists where it lists them, then the new ones, sorted. The order is what the API
// server's refusal of an unknown profile lists, and what generated specs draw from, so a new
// profile does not reorder them.
func enumOrder(old string, names []string) []string {
	var out []string
	for _, n := range strings.Split(old, ";") {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// celMap is the CEL map literal of value over the profiles names.
func celMap(names []string, value func(cache.Profile) any) string {
	var parts []string
	for _, n := range names {
		p, _ := cache.LookupProfile(n)
		parts = append(parts, quote(n)+": "+celValue(value(p)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func celValue(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case []string:
		q := slices.Clone(v)
		for i := range q {
			q[i] = quote(q[i])
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	panic(fmt.Sprintf("a table value of type %T", v))
}

func quote(s string) string { return "'" + s + "'" }
