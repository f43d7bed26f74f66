package argspec

import (
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Python's int() and float() accept surrounding whitespace, a sign and
// single underscores between digits.
var (
	pythonInt   = regexp.MustCompile(`^[+-]?\d+(?:_\d+)*$`)
	pythonFloat = regexp.MustCompile(`^[+-]?(?:\d+(?:_\d+)*(?:\.(?:\d+(?:_\d+)*)?)?|\.\d+(?:_\d+)*)(?:[eE][+-]?\d+(?:_\d+)*)?$`)
	pythonInf   = regexp.MustCompile(`^[+-]?(?:inf|infinity|nan)$`)
	// sglang's human_readable_int: SI suffixes allow decimals, IEC do not.
	humanSI  = regexp.MustCompile(`^\d+(?:\.\d+)?[kMGT]$`)
	humanIEC = regexp.MustCompile(`^\d+(?:Ki|Mi|Gi|Ti)$`)
)

// pythonSpace is what Python's str.strip() removes from ASCII input.
const pythonSpace = " \t\n\r\v\f"

func parseInt(v string) (int64, bool) {
	v = strings.Trim(v, pythonSpace)
	if !pythonInt.MatchString(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
	if err != nil {
		// Python ints are unbounded; a value this large is still an int.
		return 0, true
	}
	return n, true
}

func parseFloat(v string) (float64, bool) {
	v = strings.Trim(v, pythonSpace)
	if pythonInf.MatchString(strings.ToLower(v)) {
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	if !pythonFloat.MatchString(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(v, "_", ""), 64)
	if err != nil {
		// Overflow: Python returns inf, which is still a float.
		return math.Inf(1), true
	}
	return f, true
}

func validHumanReadableInt(v string) bool {
	v = strings.Trim(v, pythonSpace)
	if humanSI.MatchString(v) || humanIEC.MatchString(v) {
		return true
	}
	_, ok := parseInt(v)
	return ok
}

// typeDescription is how a problem names what a type expects.
var typeDescription = map[string]string{
	TypeInt:              "an integer",
	TypeFloat:            "a number",
	TypeJSON:             "a JSON document",
	TypeJSONList:         "a JSON document",
	TypeHumanReadableInt: "an integer, optionally with an SI (1k, 2.5M) or IEC (1Ki, 4Gi) suffix",
}

// checkValue converts v the way the argument's type would, then checks the
// converted value against the choices, as argparse does.
func checkValue(flag string, a Argument, v string) (Problem, bool) {
	switch a.Type {
	case TypeInt:
		n, ok := parseInt(v)
		if !ok {
			return Problem{Kind: InvalidType, Flag: flag, Value: v, Detail: typeDescription[a.Type]}, false
		}
		if a.Choices != nil && !slices.ContainsFunc(a.Choices, func(c string) bool {
			m, ok := parseInt(c)
			return ok && m == n
		}) {
			return Problem{Kind: InvalidChoice, Flag: flag, Value: v, Allowed: a.Choices}, false
		}
		return Problem{}, true
	case TypeFloat:
		f, ok := parseFloat(v)
		if !ok {
			return Problem{Kind: InvalidType, Flag: flag, Value: v, Detail: typeDescription[a.Type]}, false
		}
		if a.Choices != nil && !slices.ContainsFunc(a.Choices, func(c string) bool {
			g, ok := parseFloat(c)
			return ok && g == f
		}) {
			return Problem{Kind: InvalidChoice, Flag: flag, Value: v, Allowed: a.Choices}, false
		}
		return Problem{}, true
	case TypeJSON, TypeJSONList:
		if !json.Valid([]byte(v)) {
			return Problem{Kind: InvalidType, Flag: flag, Value: v, Detail: typeDescription[a.Type]}, false
		}
	case TypeHumanReadableInt:
		if !validHumanReadableInt(v) {
			return Problem{Kind: InvalidType, Flag: flag, Value: v, Detail: typeDescription[a.Type]}, false
		}
	}
	if a.Choices != nil && !slices.Contains(a.Choices, v) {
		return Problem{Kind: InvalidChoice, Flag: flag, Value: v, Allowed: a.Choices}, false
	}
	return Problem{}, true
}
