package imagebuild

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRequirements(t *testing.T) {
	reqs, err := ParseRequirements([]byte("# comment\nsetproctitle==1.3.8 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\nsmg==1.13.0 \\\n    --hash=sha256:" + strings.Repeat("b", 64) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[1].Name != "smg" || reqs[1].Version != "1.13.0" || reqs[1].SHA256[0] != strings.Repeat("b", 64) {
		t.Fatalf("got %+v", reqs)
	}
	for name, doc := range map[string]string{
		"no hash":    "smg==1.13.0\n",
		"not pinned": "smg>=1.0 \\\n --hash=sha256:" + strings.Repeat("b", 64) + "\n",
		"empty":      "# nothing\n",
	} {
		if _, err := ParseRequirements([]byte(doc)); err == nil {
			t.Errorf("%s: accepted %q", name, doc)
		}
	}
}

func TestInstallWheel(t *testing.T) {
	dir := t.TempDir()
	wheel := filepath.Join(dir, "pkg-1.0-py3-none-any.whl")
	f, err := os.Create(wheel)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{
		"pkg/__init__.py":                 "x = 1\n",
		"pkg/native.so":                   "ELF",
		"pkg-1.0.dist-info/METADATA":      "Name: pkg\n",
		"pkg-1.0.data/platlib/extra.py":   "y = 2\n",
		"pkg-1.0.data/scripts/pkg-script": "#!/bin/sh\n",
	} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(dir, "root", "usr", "local", "lib", "python3.11", "dist-packages")
	if err := InstallWheel(wheel, site); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pkg/__init__.py", "pkg/native.so", "pkg-1.0.dist-info/METADATA", "extra.py"} {
		st, err := os.Stat(filepath.Join(site, want))
		if err != nil {
			t.Errorf("%s was not installed: %v", want, err)
			continue
		}
		if st.Mode().Perm() != 0o644 || st.ModTime().Unix() != 0 {
			t.Errorf("%s: mode %v, time %v; want 0644 at the epoch", want, st.Mode().Perm(), st.ModTime())
		}
	}
	if _, err := os.Stat(filepath.Join(site, "pkg-script")); err == nil {
		t.Errorf("a script was installed into site-packages")
	}
}
