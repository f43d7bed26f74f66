package argspec

import (
	"fmt"
	"regexp"
	"strings"
)

// ProblemKind classifies what is wrong with one part of a command line.
type ProblemKind string

// The kinds of problems Parse reports.
const (
	// UnknownFlag is an option the release does not register.
	UnknownFlag ProblemKind = "UnknownFlag"
	// AmbiguousFlag is an abbreviation that matches several options.
	AmbiguousFlag ProblemKind = "AmbiguousFlag"
	// MissingValue is an option given fewer values than it needs.
	MissingValue ProblemKind = "MissingValue"
	// UnexpectedValue is a value given to an option that takes none, such as
	// a store_true switch written --flag=true.
	UnexpectedValue ProblemKind = "UnexpectedValue"
	// InvalidChoice is a value outside the option's choices.
	InvalidChoice ProblemKind = "InvalidChoice"
	// InvalidType is a value its converter rejects, such as "four" for an int.
	InvalidType ProblemKind = "InvalidType"
	// UnexpectedArgument is a bare word no option consumes; the server takes
	// no positional arguments.
	UnexpectedArgument ProblemKind = "UnexpectedArgument"
	// MissingRequired is a required option that is absent.
	MissingRequired ProblemKind = "MissingRequired"
)

// Problem is one thing argparse would refuse.
type Problem struct {
	Kind ProblemKind
	// Flag is the option as written, or the canonical flag of a missing one.
	Flag string
	// Value is the offending value, when there is one.
	Value string
	// Allowed lists what would be accepted: choices, or the options an
	// ambiguous abbreviation matches.
	Allowed []string
	// Detail is the expected type or value count.
	Detail string
	// Program is the program whose table found the problem; empty means sglang.
	Program string
}

func (p Problem) Error() string {
	allowed := strings.Join(p.Allowed, ", ")
	switch p.Kind {
	case UnknownFlag:
		return fmt.Sprintf("unknown flag %s: the pinned %s release has no such argument; remove it or check its spelling", p.Flag, programOr(p.Program))
	case AmbiguousFlag:
		return fmt.Sprintf("flag %s is an ambiguous abbreviation of %s; write the full flag", p.Flag, allowed)
	case MissingValue:
		msg := fmt.Sprintf("flag %s %s", p.Flag, p.Detail)
		if allowed != "" {
			msg += fmt.Sprintf(" (one of: %s)", allowed)
		}
		return msg
	case UnexpectedValue:
		return fmt.Sprintf("flag %s is a switch and takes no value, but was given %q; write %s alone", p.Flag, p.Value, p.Flag)
	case InvalidChoice:
		return fmt.Sprintf("flag %s does not accept %q; allowed values: %s", p.Flag, p.Value, allowed)
	case InvalidType:
		return fmt.Sprintf("flag %s needs %s, but was given %q", p.Flag, p.Detail, p.Value)
	case UnexpectedArgument:
		return fmt.Sprintf("unexpected argument %q: the server takes no positional arguments, so a flag is probably missing before it", p.Value)
	case MissingRequired:
		return fmt.Sprintf("flag %s is required", p.Flag)
	}
	return fmt.Sprintf("%s: %s %q", p.Kind, p.Flag, p.Value)
}

// ValidationError lists every problem found in a command line.
type ValidationError struct {
	// Version is the release the command line was checked against, of Program (empty: sglang).
	Version  string
	Program  string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		lines = append(lines, p.Error())
	}
	return fmt.Sprintf("the command line would be refused by %s %s: %s", programOr(e.Program), e.Version, strings.Join(lines, "; "))
}

// Unwrap exposes each problem to errors.Is and errors.As.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, 0, len(e.Problems))
	for _, p := range e.Problems {
		out = append(out, p)
	}
	return out
}

// Occurrence is one option found on a command line.
type Occurrence struct {
	// Index is the position of the option in the command line.
	Index int
	// Flag is the option as written, without an "=value" part; an
	// abbreviation is kept as written.
	Flag string
	// Argument is the registered argument the option resolved to.
	Argument Argument
	// Values are the values the option consumed.
	Values []string
}

// Validate checks a command line (the arguments after the program name)
// the way the release's argparse parser would, and returns every problem
// joined in a *ValidationError, or nil.
func (s *Spec) Validate(args []string) error {
	_, err := s.Parse(args)
	return err
}

// negativeNumber is argparse's pattern for strings that look like negative
// numbers; since no option of the release looks like one, such strings are
// values, not options.
var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

type token struct {
	raw      string
	option   bool
	known    bool
	flag     string
	explicit *string
	arg      Argument
	problem  *Problem
}

// classify follows argparse's _parse_optional (Python 3.11): exact option,
// option=value, unique abbreviation, negative number, words with spaces.
func (s *Spec) classify(raw string) token {
	t := token{raw: raw}
	if raw == "" || raw[0] != '-' {
		return t
	}
	if a, ok := s.Lookup(raw); ok {
		return token{raw: raw, option: true, known: true, flag: raw, arg: a}
	}
	if len(raw) == 1 {
		return t
	}
	name, value, hasValue := strings.Cut(raw, "=")
	if hasValue {
		if a, ok := s.Lookup(name); ok {
			return token{raw: raw, option: true, known: true, flag: name, explicit: &value, arg: a}
		}
	}
	if strings.HasPrefix(raw, "--") {
		prefix := raw
		if hasValue {
			prefix = name
		}
		var matches []string
		for _, f := range s.longFlags {
			if strings.HasPrefix(f, prefix) {
				matches = append(matches, f)
			}
		}
		switch {
		case len(matches) > 1:
			return token{raw: raw, option: true, flag: prefix, problem: &Problem{Kind: AmbiguousFlag, Flag: prefix, Allowed: matches}}
		case len(matches) == 1:
			a, _ := s.Lookup(matches[0])
			t := token{raw: raw, option: true, known: true, flag: prefix, arg: a}
			if hasValue {
				t.explicit = &value
			}
			return t
		}
	}
	if negativeNumber.MatchString(raw) {
		return t
	}
	if strings.Contains(raw, " ") {
		return t
	}
	return token{raw: raw, option: true, flag: name, problem: &Problem{Kind: UnknownFlag, Flag: name}}
}

// Parse reads a command line the way the release's argparse parser would and
// returns the options it found. The error, when not nil, is a
// *ValidationError listing every problem; the occurrences are still
// returned so callers can inspect what did parse.
func (s *Spec) Parse(args []string) ([]Occurrence, error) {
	tokens := make([]token, len(args))
	for i, raw := range args {
		tokens[i] = s.classify(raw)
	}
	// Everything after "--" is positional.
	for i, raw := range args {
		if raw == "--" {
			for j := i + 1; j < len(tokens); j++ {
				tokens[j] = token{raw: args[j]}
			}
			break
		}
	}

	var problems []Problem
	var found []Occurrence
	seen := map[string]bool{}
	for i := 0; i < len(tokens); {
		t := tokens[i]
		if t.raw == "--" {
			i++
			continue
		}
		if !t.option {
			problems = append(problems, Problem{Kind: UnexpectedArgument, Value: t.raw})
			i++
			continue
		}
		// Values that follow: every non-option token up to the next option.
		end := i + 1
		for end < len(tokens) && !tokens[end].option && tokens[end].raw != "--" {
			end++
		}
		following := args[i+1 : end]
		if !t.known {
			problems = append(problems, *t.problem)
			// argparse reports an unknown option together with the words
			// after it; report the option once and skip its words.
			i = end
			continue
		}
		n := t.arg.Nargs
		var values []string
		next := i + 1
		switch {
		case t.explicit != nil && !n.TakesValue():
			problems = append(problems, Problem{Kind: UnexpectedValue, Flag: t.flag, Value: *t.explicit})
		case t.explicit != nil && n.Min > 1:
			problems = append(problems, Problem{Kind: MissingValue, Flag: t.flag, Detail: nargsNeed(n), Allowed: t.arg.Choices})
		case t.explicit != nil:
			values = []string{*t.explicit}
		default:
			take := len(following)
			if n.Max >= 0 && take > n.Max {
				take = n.Max
			}
			if take < n.Min {
				problems = append(problems, Problem{Kind: MissingValue, Flag: t.flag, Detail: nargsNeed(n), Allowed: t.arg.Choices})
			}
			values = following[:take]
			next = i + 1 + take
		}
		for _, v := range values {
			if p, ok := checkValue(t.flag, t.arg, v); !ok {
				problems = append(problems, p)
			}
		}
		seen[t.arg.Dest+"\x00"+t.arg.Flags[0]] = true
		found = append(found, Occurrence{Index: i, Flag: t.flag, Argument: t.arg, Values: values})
		i = next
	}
	for _, a := range s.arguments {
		if a.Required && !seen[a.Dest+"\x00"+a.Flags[0]] {
			problems = append(problems, Problem{Kind: MissingRequired, Flag: a.Flags[0]})
		}
	}
	if len(problems) > 0 {
		if s.program != "" {
			for i := range problems {
				problems[i].Program = s.program
			}
		}
		return found, &ValidationError{Version: s.version, Program: s.program, Problems: problems}
	}
	return found, nil
}

func nargsNeed(n Nargs) string {
	switch {
	case n.Min == 1 && n.Max == 1:
		return "needs a value"
	case n.Max < 0:
		return fmt.Sprintf("needs at least %d value(s)", n.Min)
	default:
		return fmt.Sprintf("needs %d values", n.Min)
	}
}

// programOr is the program named in messages: sglang unless the table names another.
func programOr(p string) string {
	if p == "" {
		return "sglang"
	}
	return p
}
