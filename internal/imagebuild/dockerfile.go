package imagebuild

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Stage is what a Dockerfile stage sets that the locally built images must agree with. Only the
// instructions this repository's Dockerfiles use are read.
type Stage struct {
	From string
	// Args are the stage's ARG defaults (and the global ones before the first FROM).
	Args map[string]string
	User string
	// Entrypoint and Cmd are nil when the stage does not set them and empty for `[]`.
	Entrypoint []string
	Cmd        []string
	// Runs are the RUN commands, with continuation lines joined.
	Runs []string
}

// ParseDockerfile returns the stages of a Dockerfile, the final (shipped) one last.
func ParseDockerfile(data []byte) ([]Stage, error) {
	global := map[string]string{}
	var stages []Stage
	for _, ins := range instructions(data) {
		word, rest, _ := strings.Cut(ins, " ")
		rest = strings.TrimSpace(rest)
		word = strings.ToUpper(word)
		if word == "FROM" {
			args := maps.Clone(global)
			image := strings.Fields(rest)
			if len(image) == 0 {
				return nil, fmt.Errorf("FROM without an image")
			}
			stages = append(stages, Stage{From: expand(image[0], global), Args: args})
			continue
		}
		if word == "ARG" {
			k, v, _ := strings.Cut(rest, "=")
			if len(stages) == 0 {
				global[k] = v
			} else {
				stages[len(stages)-1].Args[k] = v
			}
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s before the first FROM", word)
		}
		s := &stages[len(stages)-1]
		var err error
		switch word {
		case "USER":
			s.User = expand(rest, s.Args)
		case "ENTRYPOINT":
			s.Entrypoint, err = execForm(rest)
		case "CMD":
			s.Cmd, err = execForm(rest)
		case "RUN":
			s.Runs = append(s.Runs, rest)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", word, rest, err)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return stages, nil
}

// instructions joins continuation lines and drops comments and blank lines.
func instructions(data []byte) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		cont := strings.HasSuffix(line, `\`)
		line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
		if cur.Len() > 0 && line != "" {
			cur.WriteByte(' ')
		}
		cur.WriteString(line)
		if !cont {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// execForm reads ["a", "b"]; the shell form is what `docker build` makes of it.
func execForm(s string) ([]string, error) {
	if !strings.HasPrefix(s, "[") {
		return []string{"/bin/sh", "-c", s}, nil
	}
	out := []string{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// expand replaces ${NAME} and $NAME with the ARG defaults, longer names first so that $AB is
// not read as $A followed by B.
func expand(s string, args map[string]string) string {
	keys := slices.Collect(maps.Keys(args))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	for _, k := range keys {
		s = strings.ReplaceAll(s, "${"+k+"}", args[k])
		s = strings.ReplaceAll(s, "$"+k, args[k])
	}
	return s
}
