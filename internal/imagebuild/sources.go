package imagebuild

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// SourceFile is one of the machine's apt source files: /etc/apt/sources.list (one-line format)
// or a file of /etc/apt/sources.list.d (.list one-line, .sources deb822).
type SourceFile struct {
	Name string
	Data []byte
}

// DebianMirror picks the archive to bootstrap a suite from: the first enabled `deb` source, in
// the order given (apt's: sources.list, then sources.list.d by name), that carries the suite
// itself (not -updates or -security) with the main component. The mirror is read from the
// machine at build time, so none is written into the repository.
func DebianMirror(files []SourceFile, suite string) (string, error) {
	for _, f := range files {
		var uri string
		if strings.HasSuffix(f.Name, ".sources") {
			uri = mirrorDeb822(f.Data, suite)
		} else {
			uri = mirrorOneLine(f.Data, suite)
		}
		if uri != "" {
			return uri, nil
		}
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name)
	}
	return "", fmt.Errorf("no apt source for Debian %s main in %s: add one (e.g. a deb line for %s main) or pass the mirror with -mirror", suite, strings.Join(names, ", "), suite)
}

func mirrorOneLine(data []byte, suite string) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		fields := strings.Fields(line)
		if len(fields) < 4 || fields[0] != "deb" {
			continue
		}
		rest := fields[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Options: [arch=amd64 signed-by=...], possibly over several fields.
			for len(rest) > 0 && !strings.HasSuffix(rest[0], "]") {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				continue
			}
			rest = rest[1:]
		}
		if len(rest) >= 3 && rest[1] == suite && slices.Contains(rest[2:], "main") {
			return rest[0]
		}
	}
	return ""
}

func mirrorDeb822(data []byte, suite string) string {
	for _, stanza := range bytes.Split(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\n\n")) {
		fields := map[string][]string{}
		last := ""
		for _, line := range strings.Split(string(stanza), "\n") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if line[0] == ' ' || line[0] == '\t' {
				if last != "" {
					fields[last] = append(fields[last], strings.Fields(line)...)
				}
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.Fields(v)
		}
		if e := fields["enabled"]; len(e) == 1 && strings.EqualFold(e[0], "no") {
			continue
		}
		if slices.Contains(fields["types"], "deb") && slices.Contains(fields["suites"], suite) &&
			slices.Contains(fields["components"], "main") && len(fields["uris"]) > 0 {
			return fields["uris"][0]
		}
	}
	return ""
}
