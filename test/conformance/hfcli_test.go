package conformance

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// TestHubCLIDefinitionsAreThePinnedReleases: internal/hfcli's definitions are what the pinned
// huggingface_hub's `hf download` defines (hack/hf-args.sh --check re-reads them), and its
// checker agrees with the real CLI's parser, run offline, on the download command the operator
// renders and on lines that parser refuses.
func TestHubCLIDefinitionsAreThePinnedReleases(t *testing.T) {
	python := sglangPython(t)
	root := mooncaketest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "hf-args.sh"), "--check").CombinedOutput(); err != nil {
		t.Fatalf("hack/hf-args.sh --check: %v\n%s", err, out)
	}
	spec, err := hfcli.Default()
	if err != nil {
		t.Fatal(err)
	}
	h := testutil.HCD("d").Profile("DeepSeekV4").TP(16).FromHub("deepseek-ai/DeepSeek-V4", "5b0c7e2a9d1f4c3b8e6a0d2f1c4b7e9a3d5f8c1b", "hf-token", "token").Obj()
	model, err := resolve.Model(&h.Spec)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{
		"the rendered download": hfcli.DownloadCommand(h.Spec.Model.Source.Hub.Repo, h.Spec.Model.Revision, model.Path),
		"a file and patterns":   {"hf", "download", "org/m", "config.json", "--include", "*.json", "--max-workers=4"},
		"an unknown option":     {"hf", "download", "org/m", "--local-dir-use-symlinks", "False"},
		"no repository":         {"hf", "download", "--revision", "main"},
		"a missing value":       {"hf", "download", "org/m", "--revision"},
		"not an integer":        {"hf", "download", "org/m", "--max-workers", "many"},
		"not a repository type": {"hf", "download", "org/m", "--repo-type", "weights"},
	}
	home := t.TempDir()
	for name, argv := range lines {
		t.Run(name, func(t *testing.T) {
			// Offline, a line the CLI takes gets as far as asking the hub, which offline mode
			// refuses (exit 1, naming HF_HUB_OFFLINE); any other end (click's usage error, exit
			// 2, or a crash on what the parser let through) is a refusal. Nothing is downloaded.
			// python -c SCRIPT download ARGS...: sys.argv is ["-c", "download", ARGS...].
			script := "import sys; from huggingface_hub.cli.hf import main; sys.argv[0] = 'hf'; main()"
			cmd := exec.CommandContext(ctx, python, append([]string{"-c", script}, argv[1:]...)...)
			cmd.Dir = home
			cmd.Env = []string{"HF_HUB_OFFLINE=1", "HF_HOME=" + filepath.Join(home, "hf"), "HOME=" + home, "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the hub CLI: %v", err)
			}
			refused := exit == nil || exit.ExitCode() != 1 || !strings.Contains(string(out), "HF_HUB_OFFLINE")
			if verdict := spec.Validate(argv); (verdict != nil) != refused {
				t.Errorf("%q: the pinned CLI refuses it: %v (exit %v)\n%s\ninternal/hfcli says: %v",
					argv, refused, err, strings.TrimSpace(string(out)), verdict)
			}
		})
	}
}
