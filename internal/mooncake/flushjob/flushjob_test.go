package flushjob

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

func TestScriptReadsEveryDocumentedVariable(t *testing.T) {
	for _, env := range []string{EnvMaster, EnvPrefix, EnvAdminURL, EnvForce, EnvRequireEmpty, EnvTenantID,
		EnvLocalHostname, EnvProtocol, EnvMetadataServer, EnvTimeout, EnvVerbose} {
		read := regexp.MustCompile(`env(_bool)?\("` + env + `"`)
		if !read.MatchString(Script) {
			t.Errorf("flush.py does not read %s", env)
		}
	}
}

func TestScriptExitCodesMatch(t *testing.T) {
	codes := map[string]int{"EXIT_FAILED": ExitFailed, "EXIT_USAGE": ExitUsage, "EXIT_NOT_EMPTY": ExitNotEmpty}
	for name, want := range codes {
		m := regexp.MustCompile(`(?m)^` + name + ` = (\d+)$`).FindStringSubmatch(Script)
		if m == nil {
			t.Errorf("flush.py does not define %s", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("flush.py %s = %d, Go says %d", name, got, want)
		}
	}
}

func TestHackCopyIsTheEmbeddedScript(t *testing.T) {
	// hack/mooncake/flush.py is a symbolic link to this package's file, not a copy.
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "hack", "mooncake", "flush.py"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != Script {
		t.Error("hack/mooncake/flush.py differs from the embedded script")
	}
}
