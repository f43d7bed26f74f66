package sglang

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// ArgClass is how an argument of the pinned release is treated when it comes
// through the extra arguments (spec.template.extraArgs).
type ArgClass string

// The argument classes. Every argument of the release has exactly one.
const (
	// ArgLayout changes the bytes behind unchanged L3 keys: given as an extra
	// argument it becomes a layout fact, so a change moves the writers to a
	// new L3 namespace.
	ArgLayout ArgClass = "layout"
	// ArgKeys changes the L3 keys by itself (token ids, adapter ids) and never
	// the bytes behind a key: a change meets no stale object.
	ArgKeys ArgClass = "keys"
	// ArgRefused may not be an extra argument: the spec has a field for it,
	// the operator sets it, or the operator cannot keep the store correct
	// with it.
	ArgRefused ArgClass = "refused"
	// ArgNeutral changes neither the keys nor the bytes behind a key.
	ArgNeutral ArgClass = "neutral"
)

// ArgRule is the class of one argument, with the reason for it.
type ArgRule struct {
	// Flag is the argument's canonical flag (its first option string).
	Flag  string
	Class ArgClass
	// Field is the spec field to set instead, for a refused argument the
	// spec has a field for; empty otherwise.
	Field string
	// Reason says why, as the end of "spec.template.extraArgs sets <flag>,
	// which ..." for a refused argument; optional for a neutral one.
	Reason string
	// ReadsFile marks a flag whose value names a file or directory SGLang reads (its reason
	// starts with "file:" in the table): where that file lies is checked against the pod's
	// volumes (internal/resolve, podmounts.go).
	ReadsFile bool
}

// fileMarker starts the reason of a file-valued flag in extra_args.txt.
const fileMarker = "file:"

//go:embed extra_args.txt
var embeddedArgRules []byte

var defaultArgRules = sync.OnceValues(func() (map[string]ArgRule, error) { return ParseArgRules(embeddedArgRules) })

// ArgRules returns the classes of the pinned release's arguments, keyed by
// canonical flag, parsed once from the embedded extra_args.txt.
func ArgRules() (map[string]ArgRule, error) { return defaultArgRules() }

// ParseArgRules reads a classification in the extra_args.txt format: one
// line per argument, "<flag> <class> [<field>] [<reason>]", where refused
// lines name a spec field or "-" and every non-neutral line has a reason;
// blank lines and lines starting with # are ignored.
func ParseArgRules(data []byte) (map[string]ArgRule, error) {
	lines, err := parseClassTable(data, "flag", "a flag", func(s string) bool { return strings.HasPrefix(s, "-") })
	if err != nil {
		return nil, err
	}
	rules := make(map[string]ArgRule, len(lines))
	for flag, l := range lines {
		r := ArgRule{Flag: flag, Class: l.Class, Field: l.Field, Reason: l.Reason}
		if rest, ok := strings.CutPrefix(r.Reason, fileMarker); ok {
			r.ReadsFile, r.Reason = true, strings.TrimSpace(rest)
			if r.Class == ArgRefused {
				return nil, fmt.Errorf("%s is refused and marked %s: a refused flag is never read", flag, fileMarker)
			}
		}
		rules[flag] = r
	}
	return rules, nil
}

// UnclassifiedArgs compares a release's argument table with a
// classification: missing are canonical flags of the release that have no
// rule, stale are rules for flags the release does not have. Both are sorted.
func UnclassifiedArgs(spec *argspec.Spec, rules map[string]ArgRule) (missing, stale []string) {
	known := map[string]bool{}
	for _, a := range spec.Arguments() {
		f := a.Flags[0]
		known[f] = true
		if _, ok := rules[f]; !ok {
			missing = append(missing, f)
		}
	}
	for f := range rules {
		if !known[f] {
			stale = append(stale, f)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	return missing, stale
}

// RefusedArgError is an extra argument that may not be given there.
type RefusedArgError struct {
	// Flag is the option as written (an alias or abbreviation included).
	Flag string
	Rule ArgRule
}

func (e *RefusedArgError) Error() string {
	flag := e.Flag
	if flag != e.Rule.Flag {
		flag = fmt.Sprintf("%s (%s)", e.Flag, e.Rule.Flag)
	}
	if e.Rule.Field != "" {
		return fmt.Sprintf("spec.template.extraArgs sets %s, which %s; set %s instead", flag, e.Rule.Reason, e.Rule.Field)
	}
	return fmt.Sprintf("spec.template.extraArgs sets %s, which %s; remove it", flag, e.Rule.Reason)
}

// ExtraArgs is what a list of extra arguments means to the L3 store: the
// value of every flag it sets, by class, keyed by canonical flag. A flag set
// to the release's default is left out, so writing a default changes nothing.
type ExtraArgs struct {
	Layout  map[string]string
	Keys    map[string]string
	Neutral map[string]string
}

// ClassifyExtraArgs parses extra arguments against the pinned release and
// sorts the flags they set by class. The error joins every problem: flags
// the release would refuse, and flags refused as extra arguments, each as a
// sentence naming the spec field to use.
func ClassifyExtraArgs(args []string) (ExtraArgs, error) {
	return ClassifyExtraArgsFor("", args)
}

// ClassifyExtraArgsFor is ClassifyExtraArgs against the arguments of a checked release ("" is
// the pinned one).
func ClassifyExtraArgsFor(release string, args []string) (ExtraArgs, error) {
	out := ExtraArgs{}
	if len(args) == 0 {
		return out, nil
	}
	spec, err := argspec.ForRelease(release)
	if err != nil {
		return out, fmt.Errorf("loading the sglang argument table: %w", err)
	}
	rules, err := ArgRules()
	if err != nil {
		return out, fmt.Errorf("loading the classification of sglang arguments: %w", err)
	}
	occ, perr := spec.Parse(args)
	var errs []error
	if perr != nil {
		if e := withoutMissingRequired(perr); e != nil {
			errs = append(errs, fmt.Errorf("spec.template.extraArgs: %w", e))
		}
	}
	for _, o := range occ {
		flag := o.Argument.Flags[0]
		rule, ok := rules[flag]
		if !ok {
			// The classification test walks the whole table, so this is a
			// build that skipped it; refusing is the safe answer.
			rule = ArgRule{Flag: flag, Class: ArgRefused, Reason: fmt.Sprintf("is not classified for sglang %s", spec.Version())}
		}
		if rule.Class == ArgRefused {
			errs = append(errs, &RefusedArgError{Flag: o.Flag, Rule: rule})
			continue
		}
		var into *map[string]string
		switch rule.Class {
		case ArgLayout:
			into = &out.Layout
		case ArgKeys:
			into = &out.Keys
		default:
			into = &out.Neutral
		}
		if *into == nil {
			*into = map[string]string{}
		}
		v := occurrenceValue(o)
		if o.Argument.Action == argspec.ActionStore || o.Argument.Nargs.Max == 0 {
			(*into)[flag] = v // the last one wins, as in argparse
		} else if prev, seen := (*into)[flag]; seen {
			(*into)[flag] = prev + " " + v
		} else {
			(*into)[flag] = v
		}
	}
	for _, m := range []*map[string]string{&out.Layout, &out.Keys, &out.Neutral} {
		for flag, v := range *m {
			if a, ok := spec.Lookup(flag); ok && isDefault(a, v) {
				delete(*m, flag)
			}
		}
		if len(*m) == 0 {
			*m = nil
		}
	}
	return out, errors.Join(errs...)
}

// withoutMissingRequired drops the release's required --model-path, which
// the rendered flags carry and extra arguments need not.
func withoutMissingRequired(err error) error {
	var ve *argspec.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var problems []argspec.Problem
	for _, p := range ve.Problems {
		if p.Kind != argspec.MissingRequired {
			problems = append(problems, p)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &argspec.ValidationError{Version: ve.Version, Problems: problems}
}

// occurrenceValue is what an option sets: its values joined by spaces, or
// true/false for a switch.
func occurrenceValue(o argspec.Occurrence) string {
	if len(o.Values) > 0 {
		return strings.Join(o.Values, " ")
	}
	switch {
	case o.Argument.Action == argspec.ActionStoreFalse:
		return "false"
	case o.Argument.Action == argspec.ActionBooleanOptional && strings.HasPrefix(o.Flag, "--no-"):
		return "false"
	}
	return "true"
}

// ArgDefault is the pinned release's default of a flag (any spelling) as the text a command line
// would give it, when the release has a literal, non-null one.
func ArgDefault(flag string) (string, bool) {
	spec, err := argspec.Default()
	if err != nil {
		return "", false
	}
	a, ok := spec.Lookup(flag)
	if !ok || len(a.Default) == 0 {
		return "", false
	}
	var def any
	if err := json.Unmarshal(a.Default, &def); err != nil {
		return "", false
	}
	switch d := def.(type) {
	case string:
		return d, d != ""
	case bool:
		return strconv.FormatBool(d), true
	case float64:
		return strconv.FormatFloat(d, 'g', -1, 64), true
	}
	return "", false
}

// isDefault reports whether v is the release's literal default of a.
func isDefault(a argspec.Argument, v string) bool {
	if len(a.Default) == 0 {
		return false
	}
	var def any
	if err := json.Unmarshal(a.Default, &def); err != nil {
		return false
	}
	switch d := def.(type) {
	case string:
		return v == d
	case bool:
		return v == strconv.FormatBool(d)
	case float64:
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && f == d
	}
	return false
}
