package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// serverArgs are the server's arguments as SGLang 0.5.23's /server_info reports them (its
// ServerArgs, by attribute name): every argument's default where the release states one as a
// literal, overlaid with the values of the command line, converted as argparse would; and
// served_model_name falling back to model_path, as the release resolves it.
func serverArgs(spec *argspec.Spec, occ []argspec.Occurrence) map[string]any {
	out := map[string]any{}
	for _, a := range spec.Arguments() {
		if len(a.Default) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(a.Default, &v); err == nil {
			out[a.Dest] = v
		}
	}
	for _, o := range occ {
		a := o.Argument
		switch a.Action {
		case argspec.ActionStoreTrue:
			out[a.Dest] = true
			continue
		case argspec.ActionStoreFalse:
			out[a.Dest] = false
			continue
		case argspec.ActionBooleanOptional:
			out[a.Dest] = !strings.HasPrefix(o.Flag, "--no-")
			continue
		}
		if len(o.Values) == 0 {
			continue
		}
		if a.Nargs.Max != 1 {
			vals := make([]any, len(o.Values))
			for i, v := range o.Values {
				vals[i] = typed(a.Type, v)
			}
			out[a.Dest] = vals
			continue
		}
		out[a.Dest] = typed(a.Type, o.Values[len(o.Values)-1])
	}
	if out["served_model_name"] == nil {
		out["served_model_name"] = out["model_path"]
	}
	return out
}

// typed converts a command-line value the way the argument's type does in the release.
func typed(kind, v string) any {
	switch kind {
	case argspec.TypeInt:
		if n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(v), "_", ""), 10, 64); err == nil {
			return n
		}
	case argspec.TypeFloat:
		if f, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(v), "_", ""), 64); err == nil {
			return f
		}
	case argspec.TypeJSON, argspec.TypeJSONList:
		var out any
		if err := json.Unmarshal([]byte(v), &out); err == nil {
			return out
		}
	}
	return v
}

// serverInfo is the body of /server_info: the server's arguments, the command line as the
// release reports it (launch_command: its arguments joined by spaces, keys included), the
// release's version and its frontend, and internal_states, one copy of the arguments per
// scheduler as the release's schedulers report them (one here: the stand-in runs none).
func serverInfo(args map[string]any, launch []string, version string) map[string]any {
	out := make(map[string]any, len(args)+4)
	state := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = v
		state[k] = v
	}
	out["launch_command"] = strings.Join(launch, " ")
	out["version"] = version
	out["frontend"] = "python"
	out["internal_states"] = []any{state}
	return out
}

// modelInfo is the body of /model_info, as far as the server's arguments tell it.
func modelInfo(args map[string]any) map[string]any {
	tokenizer := args["tokenizer_path"]
	if tokenizer == nil {
		tokenizer = args["model_path"]
	}
	return map[string]any{
		"model_path":          args["model_path"],
		"served_model_name":   args["served_model_name"],
		"tokenizer_path":      tokenizer,
		"is_generation":       true,
		"disaggregation_mode": args["disaggregation_mode"],
	}
}

// models is the body of /v1/models: the one served model, as the release lists it.
func models(args map[string]any, created int64) map[string]any {
	return map[string]any{"object": "list", "data": []map[string]any{{
		"id": args["served_model_name"], "object": "model", "created": created, "owned_by": "sglang",
		"root": args["served_model_name"], "max_model_len": args["context_length"],
	}}}
}

// serverArgsLogLine is the line SGLang 0.5.23 logs at start: "server_args=" and the resolved
// arguments as a Python dict, in Python's repr (the stand-in orders the keys; SGLang writes them
// in its dataclass's order).
func serverArgsLogLine(info map[string]any) string {
	keys := make([]string, 0, len(info))
	for k := range info {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("server_args={")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyRepr(k) + ": " + pyRepr(info[k]))
	}
	b.WriteString("}")
	return b.String()
}

// pyRepr is v in Python's repr, for the values JSON decodes to.
func pyRepr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\n", `\n`).Replace(v) + "'"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case float64:
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}
