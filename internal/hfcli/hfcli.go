// Package hfcli renders the hub CLI command that downloads a hub model source (`hf download`, run
// by the serving image in an init container) and checks command lines against the definitions of
// the pinned huggingface_hub release, read from its own click objects by hack/hf-args.sh into
// hf-download-args.json. Regenerate that file instead of editing it.
package hfcli

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

//go:embed hf-download-args.json
var embedded []byte

// Spec is the pinned CLI's definitions.
type Spec struct {
	// Version is the huggingface_hub release they were read from.
	Version string `json:"huggingface_hub"`
	// Program is the console script's name.
	Program  string             `json:"program"`
	Commands map[string]Command `json:"commands"`
}

// Command is one subcommand's positional arguments and options.
type Command struct {
	Arguments []Param `json:"arguments"`
	Options   []Param `json:"options"`
}

// Param is one click parameter.
type Param struct {
	Name string `json:"name"`
	// Nargs is click's count of values (-1: any number, positional only).
	Nargs     int      `json:"nargs"`
	Required  bool     `json:"required"`
	Flags     []string `json:"flags,omitempty"`
	Negations []string `json:"negations,omitempty"`
	IsFlag    bool     `json:"isFlag,omitempty"`
	Multiple  bool     `json:"multiple,omitempty"`
	Type      string   `json:"type,omitempty"`
	Choices   []string `json:"choices,omitempty"`
}

var (
	once    sync.Once
	pinned  *Spec
	loadErr error
)

// Default is the embedded definitions of the pinned release.
func Default() (*Spec, error) {
	once.Do(func() {
		s := &Spec{}
		if err := json.Unmarshal(embedded, s); err != nil {
			loadErr = fmt.Errorf("hf-download-args.json: %w", err)
			return
		}
		pinned = s
	})
	return pinned, loadErr
}

// DownloadCommand is the command line that downloads revision of repo into dir. The token, when
// there is one, comes from the HF_TOKEN variable, never from an argument: an argument would show
// in the pod's spec and in process listings (the pinned CLI itself warns about --token).
func DownloadCommand(repo, revision, dir string) []string {
	return []string{"hf", "download", repo, "--revision", revision, "--local-dir", dir}
}

// Validate checks a whole command line (program, subcommand, then its arguments) the way the
// pinned CLI's click parser would: known options only, each with the values it takes and one of
// its choices, required arguments present, no surplus positionals.
func (s *Spec) Validate(argv []string) error {
	if len(argv) < 2 {
		return fmt.Errorf("%q is not a hub CLI command line", argv)
	}
	if argv[0] != s.Program {
		return fmt.Errorf("the program is %q; the pinned huggingface_hub %s installs %q", argv[0], s.Version, s.Program)
	}
	cmd, ok := s.Commands[argv[1]]
	if !ok {
		return fmt.Errorf("%s has no subcommand %q known here (known: %s)", s.Program, argv[1], strings.Join(sortedKeys(s.Commands), ", "))
	}
	return cmd.validate(argv[2:])
}

func (c Command) option(flag string) (Param, bool, bool) {
	for _, o := range c.Options {
		if slices.Contains(o.Flags, flag) {
			return o, true, false
		}
		if slices.Contains(o.Negations, flag) {
			return o, true, true
		}
	}
	return Param{}, false, false
}

func (c Command) validate(args []string) error {
	var positional []string
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flag, value, inline := strings.Cut(a, "=")
		o, ok, negated := c.option(flag)
		if !ok {
			return fmt.Errorf("no such option: %s", flag)
		}
		if o.IsFlag || negated {
			if inline {
				return fmt.Errorf("option %s does not take a value", flag)
			}
			continue
		}
		if seen[o.Name] && !o.Multiple {
			// click keeps the last; the operator never means to say it twice.
			return fmt.Errorf("option %s is given twice", flag)
		}
		seen[o.Name] = true
		if !inline {
			if i+1 >= len(args) {
				return fmt.Errorf("option %s requires an argument", flag)
			}
			i++
			value = args[i]
		}
		if err := o.check(value); err != nil {
			return fmt.Errorf("option %s: %w", flag, err)
		}
	}
	for _, o := range c.Options {
		if o.Required && !seen[o.Name] {
			return fmt.Errorf("missing option %s", o.Flags[0])
		}
	}
	for _, p := range c.Arguments {
		switch {
		case p.Nargs < 0:
			positional = nil
		case len(positional) < p.Nargs:
			if p.Required {
				return fmt.Errorf("missing argument %s", strings.ToUpper(p.Name))
			}
		default:
			for _, v := range positional[:p.Nargs] {
				if err := p.check(v); err != nil {
					return fmt.Errorf("argument %s: %w", strings.ToUpper(p.Name), err)
				}
			}
			positional = positional[p.Nargs:]
		}
	}
	if len(positional) > 0 {
		return fmt.Errorf("got unexpected extra arguments (%s)", strings.Join(positional, " "))
	}
	return nil
}

func (p Param) check(v string) error {
	switch p.Type {
	case "int":
		if _, err := strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("%q is not a valid integer", v)
		}
	case "float":
		if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return fmt.Errorf("%q is not a valid float", v)
		}
	case "choice":
		if !slices.Contains(p.Choices, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(p.Choices, ", "))
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
