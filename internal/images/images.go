// Package images names the images this repository builds for local clusters (`make images`,
// cmd/imagebuild) and the release defaults they stand in for. It is the one place these
// references are written down: the chart values of local setups, the manager's
// --default-mooncake-image there, the local node's sandbox image and the tests take them from
// here. The package has no dependencies, so the manager can import it.
//
// Release defaults stay what a real cluster pulls (the chart's image.repository, the
// controllers' DefaultMooncakeImage); the local references below are used only through values
// and flags of local setups.
package images

const (
	// MooncakeVersion is the mooncake-transfer-engine-non-cuda release the images carry. It
	// must equal MOONCAKE_VERSION in hack/mooncake.sh (the pin the tests' master and client are
	// installed from) and the ARG in images/mooncake/Dockerfile; tests check both.
	MooncakeVersion = "0.3.13.post1"

	// ReleaseOperatorRepository is the operator image real clusters pull (the chart's default
	// image.repository, tagged with the chart's appVersion).
	ReleaseOperatorRepository = "ghcr.io/hicache-io/hicache-operator"
	// ReleaseMooncake is the Mooncake image real clusters pull (images/mooncake/Dockerfile), the
	// default of managed backends and flush Jobs that name no image.
	ReleaseMooncake = "ghcr.io/hicache-io/mooncake:" + MooncakeVersion

	// OperatorRepository and OperatorTag are the locally built operator image (the chart's
	// image.repository and image.tag in local setups).
	OperatorRepository = "localhost/hicache-operator"
	OperatorTag        = "dev"
	// Operator is the locally built operator image: the static manager on an empty base.
	Operator = OperatorRepository + ":" + OperatorTag

	// Mooncake is the locally built Mooncake image: Debian bookworm minbase, python3 and the
	// pinned wheel (mooncake_master, the store service, the Python client).
	Mooncake = "localhost/mooncake:" + MooncakeVersion

	// Pause is the sandbox image of the local node's pods (containerd's sandbox_image).
	Pause = "localhost/pause:local"
)

// Image is one locally built image: its reference and the file `make images` writes it to,
// relative to the repository's bin/images directory.
type Image struct {
	// Name is the short name the builder takes on its command line.
	Name string
	// Ref is the tag reference the tarball carries (what `ctr images import` names it).
	Ref string
	// File is the tarball's name in bin/images.
	File string
}

// All is every image `make images` builds, in build order (cheapest first).
var All = []Image{
	{Name: "pause", Ref: Pause, File: "pause.tar"},
	{Name: "operator", Ref: Operator, File: "hicache-operator.tar"},
	{Name: "mooncake", Ref: Mooncake, File: "mooncake.tar"},
}

// Dir is where `make images` writes the tarballs, relative to the repository root.
const Dir = "bin/images"

// LocalChartValues are the Helm values that make the chart run the locally built images on a
// node that has them imported: the operator image without pulls, and the local Mooncake image as
// the default of managed backends and flush Jobs.
func LocalChartValues() map[string]any {
	return map[string]any{
		"image": map[string]any{
			"repository": OperatorRepository,
			"tag":        OperatorTag,
			"pullPolicy": "Never",
		},
		"defaults": map[string]any{
			"mooncakeImage": Mooncake,
		},
	}
}
