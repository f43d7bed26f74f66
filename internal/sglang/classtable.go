package sglang

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// classLine is one line of a classification table (extra_args.txt, env_vars.txt): a name, its
// class, for a refused name the spec field to use instead, and the reason.
type classLine struct {
	Name, Field, Reason string
	Class               ArgClass
}

// parseClassTable reads a classification table: one line per name,
// "<name> <class> [<field>] [<reason>]", where refused lines name a spec field or "-" and every
// non-neutral line has a reason; blank lines and lines starting with # are ignored. placeholder
// is how the messages call a name ("flag", "NAME"), isName tells a well-formed name and kind
// says what one is ("a flag", "a variable name").
func parseClassTable(data []byte, placeholder, kind string, isName func(string) bool) (map[string]classLine, error) {
	rules := map[string]classLine{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		if len(words) < 2 {
			return nil, fmt.Errorf("line %d: %q has no class; write <%s> followed by layout, keys, refused or neutral", n, line, placeholder)
		}
		r := classLine{Name: words[0], Class: ArgClass(words[1])}
		rest := words[2:]
		switch r.Class {
		case ArgRefused:
			if len(rest) == 0 {
				return nil, fmt.Errorf("line %d: refused %s names no spec field; write the field to use, or - when there is none", n, r.Name)
			}
			if rest[0] != "-" {
				if !strings.HasPrefix(rest[0], "spec.") {
					return nil, fmt.Errorf("line %d: refused %s names %q, which is not a spec field (spec.…) or -", n, r.Name, rest[0])
				}
				r.Field = rest[0]
			}
			rest = rest[1:]
		case ArgLayout, ArgKeys, ArgNeutral:
		default:
			return nil, fmt.Errorf("line %d: %s has the class %q; use layout, keys, refused or neutral", n, r.Name, r.Class)
		}
		r.Reason = strings.Join(rest, " ")
		if r.Reason == "" && r.Class != ArgNeutral {
			return nil, fmt.Errorf("line %d: %s %s has no reason; say in a few words what it does to the L3 objects", n, r.Name, r.Class)
		}
		if !isName(r.Name) {
			return nil, fmt.Errorf("line %d: %q is not %s", n, r.Name, kind)
		}
		if _, dup := rules[r.Name]; dup {
			return nil, fmt.Errorf("line %d: %s is classified twice", n, r.Name)
		}
		rules[r.Name] = r
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return rules, nil
}
