// Package images names the images this repository builds (`make images`, cmd/imagebuild; the
// Dockerfiles build the same ones) and the upstream SGLang image of the pinned release. It is the
// one place these references are written down: the chart's values, the manager's default images,
// the local node's sandbox image and the tests take them from here, and a test checks that every
// image the chart and the defaults name is one of them. The package has no dependencies, so the
// manager can import it.
//
// No registry holds the operator's images yet: a cluster runs what `make images` (or `docker
// build`) produced, imported into its nodes or pushed to a registry of the user's (the chart's
// image.repository and defaults.mooncakeImage then name it there). Released images will be
// published where the README says.
package images

const (
	// MooncakeVersion is the mooncake-transfer-engine-non-cuda release the images carry. It
	// must equal MOONCAKE_VERSION in hack/mooncake.sh (the pin the tests' master and client are
	// installed from) and the ARG in images/mooncake/Dockerfile; tests check both.
	MooncakeVersion = "0.3.13.post1"

	// SGLangVersion is the SGLang release the rendered command lines are checked against. It
	// must equal the sglang pin of hack/sglang/requirements.txt; a test checks it.
	SGLangVersion = "0.5.23"
	// SGLang is the upstream image of that release: SGLang's release workflow publishes
	// lmsysorg/sglang:v<version> (a multi-arch manifest of its CUDA 12 builds) for every release.
	// It is the default of deployments that name no spec.sglang.image.
	SGLang = "lmsysorg/sglang:v" + SGLangVersion

	// OperatorRepository and OperatorTag are the operator image (the chart's default
	// image.repository and image.tag).
	OperatorRepository = "localhost/hicache-operator"
	OperatorTag        = "dev"
	// Operator is the locally built operator image: the static manager on an empty base.
	Operator = OperatorRepository + ":" + OperatorTag

	// Mooncake is the Mooncake image: Debian bookworm minbase, python3 and the pinned wheel
	// (mooncake_master, the store service, the Python client). It is the default of managed
	// backends and flush Jobs that name no image.
	Mooncake = "localhost/mooncake:" + MooncakeVersion

	// SGLangStandin is cmd/sglang-standin as python3 on an empty base: it runs the command line
	// the operator renders for SGLang (python3 -m sglang.launch_server ...) on a node without
	// GPUs, checks it against the pinned release's arguments and enforces its API keys.
	SGLangStandin = "localhost/sglang-standin:local"

	// SGLangCPU is the pinned SGLang release's real HTTP server for CPU nodes: the Mooncake
	// image's Debian and python3 with the pins of hack/sglang/requirements.txt and
	// hack/sglang/server-requirements.txt, hack/sglang/cpu (the pure-torch sgl_kernel stand-ins
	// and the HiCache CPU plugin) and SGLANG_USE_CPU_ENGINE=1 (docs/compatibility.md, "The SGLang
	// server on CPU"). It serves the rendered command line with --device cpu --attention-backend
	// torch_native; test/engine runs it. Built only when named (`make image-sglang-cpu`): it is
	// several GB.
	SGLangCPU = "localhost/sglang-cpu:" + SGLangVersion

	// Pause is the sandbox image of the local node's pods (containerd's sandbox_image).
	Pause = "localhost/pause:local"

	// RouterVersion is the smg release the router image carries. It must equal the smg pin of
	// hack/router/requirements.txt; a test checks it.
	RouterVersion = "1.13.0"
	// Router is the router image: the Mooncake image's Debian and python3 with the pinned smg
	// wheel (python3 -m smg.launch_router) and what its launcher imports.
	Router = "localhost/smg:" + RouterVersion

	// EtcdVersion is the etcd release of the local control plane (hack/tools/etcd/go.mod pins
	// go.etcd.io/etcd/server/v3 at it) and of the etcd image; a test checks both.
	EtcdVersion = "v3.6.16"
	// Etcd is the etcd image: the static etcd server built from that module, alone on an empty
	// base. It is the default of the etcd the operator runs for backends with HA masters
	// (spec.mooncake.managed.ha.etcd.managed).
	Etcd = "localhost/etcd:" + EtcdVersion
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
	// OnDemand images are built only when named on imagebuild's command line, not by a bare
	// `make images`.
	OnDemand bool
}

// All is every image `make images` builds, in build order (cheapest first).
var All = []Image{
	{Name: "pause", Ref: Pause, File: "pause.tar"},
	{Name: "sglang-standin", Ref: SGLangStandin, File: "sglang-standin.tar"},
	{Name: "operator", Ref: Operator, File: "hicache-operator.tar"},
	{Name: "etcd", Ref: Etcd, File: "etcd.tar"},
	{Name: "mooncake", Ref: Mooncake, File: "mooncake.tar"},
	// In a directory of its own: a real node imports the tarballs of bin/images itself, and only
	// the tests that run a router need this one.
	{Name: "router", Ref: Router, File: "router/smg.tar"},
	// In a directory of its own too, and only on demand: several GB that only test/engine runs.
	{Name: "sglang-cpu", Ref: SGLangCPU, File: "sglang-cpu/sglang-cpu.tar", OnDemand: true},
}

// Dir is where `make images` writes the tarballs, relative to the repository root.
const Dir = "bin/images"

// LocalChartValues are the Helm values that make the chart run the locally built images on a
// node that has them imported and no registry to pull from: the chart's default images, named
// explicitly, and the operator's pulled Never.
func LocalChartValues() map[string]any {
	return map[string]any{
		"image": map[string]any{
			"repository": OperatorRepository,
			"tag":        OperatorTag,
			"pullPolicy": "Never",
		},
		"defaults": map[string]any{
			"mooncakeImage": Mooncake,
			"routerImage":   Router,
			"etcdImage":     Etcd,
		},
	}
}
