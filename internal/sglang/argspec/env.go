package argspec

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// EnvVar is one environment variable the pinned SGLang release or Mooncake client reads, as
// hack/sglang-env.sh found it in their wheels.
type EnvVar struct {
	Name string `json:"name"`
	// Section is the heading of SGLang's registry (sglang/srt/environ.py) it is declared under.
	Section string `json:"section,omitempty"`
	// Defaults are the defaults its reads give it: literals as text, computed ones as <source>.
	Defaults []string `json:"defaults,omitempty"`
	// Readers are the packages that read it: sglang, mooncake or both.
	Readers []string `json:"readers"`
	// Reads are where: "FILE[:LINE] HOW".
	Reads []string `json:"reads"`
}

// Default is the one literal default every read gives the variable, if there is one.
func (v EnvVar) Default() (string, bool) {
	if len(v.Defaults) != 1 || strings.HasPrefix(v.Defaults[0], "<") {
		return "", false
	}
	return v.Defaults[0], true
}

// EnvTable is the environment variables of the pinned releases.
type EnvTable struct {
	SGLangVersion   string   `json:"sglang_version"`
	MooncakeVersion string   `json:"mooncake_version"`
	Variables       []EnvVar `json:"variables"`
	byName          map[string]int
}

// Lookup finds a variable by name.
func (t *EnvTable) Lookup(name string) (EnvVar, bool) {
	i, ok := t.byName[name]
	if !ok {
		return EnvVar{}, false
	}
	return t.Variables[i], true
}

//go:embed sglang-env.json
var embeddedEnv []byte

var defaultEnv = sync.OnceValues(func() (*EnvTable, error) { return EnvFromJSON(embeddedEnv) })

// DefaultEnv is the embedded table of the pinned releases, parsed once.
func DefaultEnv() (*EnvTable, error) { return defaultEnv() }

// EnvFromJSON reads a table in the sglang-env.json format.
func EnvFromJSON(data []byte) (*EnvTable, error) {
	t := &EnvTable{}
	if err := json.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("parsing the environment variable table: %w", err)
	}
	t.byName = make(map[string]int, len(t.Variables))
	for i, v := range t.Variables {
		if _, dup := t.byName[v.Name]; dup {
			return nil, fmt.Errorf("the environment variable table lists %s twice", v.Name)
		}
		t.byName[v.Name] = i
	}
	return t, nil
}
