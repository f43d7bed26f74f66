package imagebuild

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MooncakePin is what hack/mooncake.sh pins: the wheel and the Debian packages of the shared
// libraries its binaries link without bundling them.
type MooncakePin struct {
	Package string
	Version string
	// DebPackages are the values of the script's DEB_PACKAGE_OF, sorted and unique.
	DebPackages []string
}

var (
	assignRe = regexp.MustCompile(`^(MOONCAKE_PACKAGE|MOONCAKE_VERSION)=([A-Za-z0-9._+-]+)$`)
	debRe    = regexp.MustCompile(`^\s*\[[^\]]+\]=([a-z0-9][a-z0-9.+-]*)\s*$`)
)

// ParseMooncakePin reads the pin out of hack/mooncake.sh, so that the image carries exactly the
// release the tests run. The script names the package; the version is either assigned there or,
// when the script reads it from hack/sglang/requirements.txt (the one pin the conformance venv
// shares), taken from the requirement line package==version of requirements.
func ParseMooncakePin(script, requirements []byte) (MooncakePin, error) {
	var p MooncakePin
	inMap := false
	sc := bufio.NewScanner(bytes.NewReader(script))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inMap && strings.TrimSpace(line) == ")":
			inMap = false
		case inMap:
			m := debRe.FindStringSubmatch(line)
			if m == nil {
				return MooncakePin{}, fmt.Errorf("hack/mooncake.sh: cannot read the DEB_PACKAGE_OF entry %q: write it as [libname.so.N]=package", strings.TrimSpace(line))
			}
			p.DebPackages = append(p.DebPackages, m[1])
		case strings.HasPrefix(line, "declare -A DEB_PACKAGE_OF=("):
			inMap = true
		default:
			if m := assignRe.FindStringSubmatch(line); m != nil {
				if m[1] == "MOONCAKE_PACKAGE" {
					p.Package = m[2]
				} else {
					p.Version = m[2]
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return MooncakePin{}, err
	}
	if p.Version == "" && p.Package != "" {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(p.Package) + `==([A-Za-z0-9._+-]+)`)
		if m := re.FindSubmatch(requirements); m != nil {
			p.Version = string(m[1])
		}
	}
	switch {
	case p.Package == "" || p.Version == "":
		return MooncakePin{}, fmt.Errorf("hack/mooncake.sh has no MOONCAKE_PACKAGE=... line, or neither a MOONCAKE_VERSION=... line nor a <package>==<version> line in hack/sglang/requirements.txt")
	case len(p.DebPackages) == 0:
		return MooncakePin{}, fmt.Errorf("hack/mooncake.sh has no DEB_PACKAGE_OF map of libraries to Debian packages")
	}
	slices.Sort(p.DebPackages)
	p.DebPackages = slices.Compact(p.DebPackages)
	return p, nil
}

// DebianSuite is the Debian release of the Mooncake image, the one images/mooncake/Dockerfile's
// base (python:3.11-slim-bookworm) is built on.
const DebianSuite = "bookworm"

// Labels of the Mooncake image that say what it was built from.
const (
	LabelMooncakeVersion = "org.opencontainers.image.version"
	LabelBase            = "org.opencontainers.image.base.name"
)

// LabelEtcdVersion is the etcd image's label of the etcd release it carries.
const LabelEtcdVersion = "org.opencontainers.image.version"
