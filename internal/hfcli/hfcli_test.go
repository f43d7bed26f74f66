package hfcli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	spec, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		argv    []string
		wantErr string
	}{
		"the rendered download":      {argv: DownloadCommand("deepseek-ai/DeepSeek-V4", "3f2a9c1", "/models/deepseek-ai/DeepSeek-V4")},
		"inline values":              {argv: []string{"hf", "download", "org/m", "--revision=main", "--local-dir=/m"}},
		"files and repeated include": {argv: []string{"hf", "download", "org/m", "config.json", "--include", "*.json", "--include", "*.safetensors"}},
		"a flag and its negation":    {argv: []string{"hf", "download", "org/m", "--dry-run", "--no-force-download"}},
		"a choice":                   {argv: []string{"hf", "download", "org/m", "--repo-type", "model"}},
		"the old program":            {argv: []string{"huggingface-cli", "download", "org/m"}, wantErr: `installs "hf"`},
		"an unknown subcommand":      {argv: []string{"hf", "fetch", "org/m"}, wantErr: `no subcommand "fetch"`},
		"no repository":              {argv: []string{"hf", "download", "--revision", "main"}, wantErr: "missing argument REPO_ID"},
		"an unknown option":          {argv: []string{"hf", "download", "org/m", "--local-dir-use-symlinks", "False"}, wantErr: "no such option: --local-dir-use-symlinks"},
		"an option without value":    {argv: []string{"hf", "download", "org/m", "--revision"}, wantErr: "requires an argument"},
		"a value for a flag":         {argv: []string{"hf", "download", "org/m", "--dry-run=yes"}, wantErr: "does not take a value"},
		"not an integer":             {argv: []string{"hf", "download", "org/m", "--max-workers", "many"}, wantErr: "not a valid integer"},
		"not a choice":               {argv: []string{"hf", "download", "org/m", "--repo-type", "weights"}, wantErr: "is not one of model"},
		"a revision twice":           {argv: []string{"hf", "download", "org/m", "--revision", "a", "--revision", "b"}, wantErr: "given twice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := spec.Validate(tc.argv)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused %q: %v", tc.argv, err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("accepted %q, want an error with %q", tc.argv, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("error %q, want %q in it", err, tc.wantErr)
			}
		})
	}
}

// TestDownloadCommandNeverCarriesAToken: the token reaches the CLI as HF_TOKEN only.
func TestDownloadCommandNeverCarriesAToken(t *testing.T) {
	for _, a := range DownloadCommand("org/m", "main", "/models/org/m") {
		if strings.HasPrefix(a, "--token") {
			t.Errorf("the download command has %s", a)
		}
	}
}

// TestDefinitionsAreOfThePinnedRelease: the embedded definitions were read from the
// huggingface_hub that hack/sglang/requirements.txt pins.
func TestDefinitionsAreOfThePinnedRelease(t *testing.T) {
	spec, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "sglang", "requirements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^huggingface_hub==(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/sglang/requirements.txt pins no huggingface_hub")
	}
	if spec.Version != string(m[1]) {
		t.Errorf("hf-download-args.json is of huggingface_hub %s, the pin is %s: run hack/hf-args.sh", spec.Version, m[1])
	}
	if spec.Program != "hf" || len(spec.Commands["download"].Options) == 0 {
		t.Errorf("definitions %+v look empty", spec)
	}
}
