package imagebuild

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hicache-io/hicache-operator/internal/images"
)

func TestParseMooncakePin(t *testing.T) {
	script := `#!/usr/bin/env bash
MOONCAKE_PACKAGE=mooncake-transfer-engine-non-cuda
MOONCAKE_VERSION=0.3.13.post1
  MOONCAKE_VERSION=9.9.9
declare -A DEB_PACKAGE_OF=(
  [libibverbs.so.1]=libibverbs1
  [libnuma.so.1]=libnuma1
  [libnuma.so.2]=libnuma1
)
echo "${MOONCAKE_VERSION}"
`
	cases := map[string]struct {
		script       string
		requirements string
		want         MooncakePin
		wantErr      string
	}{
		"pin and packages, sorted and unique, indented assignments ignored": {
			script: script,
			want: MooncakePin{Package: "mooncake-transfer-engine-non-cuda", Version: "0.3.13.post1",
				DebPackages: []string{"libibverbs1", "libnuma1"}},
		},
		"no version": {
			script:       strings.Replace(script, "MOONCAKE_VERSION=0.3.13.post1\n", "", 1),
			requirements: "other==1.0 \\\n  --hash=sha256:00\n",
			wantErr:      "no MOONCAKE_PACKAGE",
		},
		"the version from the requirements when the script reads it from there": {
			script:       strings.Replace(script, "MOONCAKE_VERSION=0.3.13.post1\n", "MOONCAKE_VERSION=$(sed -n ... requirements.txt)\n", 1),
			requirements: "torch==2.14.1 \\\n    --hash=sha256:00\nmooncake-transfer-engine-non-cuda==0.3.13.post1 \\\n    --hash=sha256:11\n",
			want: MooncakePin{Package: "mooncake-transfer-engine-non-cuda", Version: "0.3.13.post1",
				DebPackages: []string{"libibverbs1", "libnuma1"}},
		},
		"no library map": {
			script:  "MOONCAKE_PACKAGE=p\nMOONCAKE_VERSION=1\n",
			wantErr: "no DEB_PACKAGE_OF",
		},
		"an entry it cannot read": {
			script:  strings.Replace(script, "[libnuma.so.2]=libnuma1", "libnuma1", 1),
			wantErr: "cannot read the DEB_PACKAGE_OF entry \"libnuma1\"",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMooncakePin([]byte(tc.script), []byte(tc.requirements))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("pin (-want +got):\n%s", d)
			}
		})
	}
}

// The image's tag, the controllers' default and the tests' master all name one Mooncake release:
// the pin in hack/mooncake.sh.
func TestRepositoryPinMatchesImages(t *testing.T) {
	script, err := os.ReadFile("../../hack/mooncake.sh")
	if err != nil {
		t.Fatal(err)
	}
	requirements, err := os.ReadFile("../../hack/sglang/requirements.txt")
	if err != nil {
		t.Fatal(err)
	}
	pin, err := ParseMooncakePin(script, requirements)
	if err != nil {
		t.Fatal(err)
	}
	if pin.Version != images.MooncakeVersion {
		t.Errorf("hack/mooncake.sh pins %s, internal/images.MooncakeVersion is %s: change both together", pin.Version, images.MooncakeVersion)
	}
	for _, lib := range []string{"libibverbs1", "libnuma1", "libcurl4"} {
		if !strings.Contains(strings.Join(pin.DebPackages, " "), lib) {
			t.Errorf("hack/mooncake.sh's DEB_PACKAGE_OF has no %s (read %v)", lib, pin.DebPackages)
		}
	}
}
