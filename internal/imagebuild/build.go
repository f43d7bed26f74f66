package imagebuild

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Spec is one image: a root file system directory that becomes its only layer, and its config.
type Spec struct {
	Ref    string
	RootFS string
	Config v1.Config
	// Base is a docker-archive tarball of one image whose layers come first; empty for none.
	Base string
	// FastCompression compresses the layer at gzip's fastest level: for layers of several GB,
	// where the default level takes minutes longer for a few percent.
	FastCompression bool
}

// Write builds the image of spec onto an empty base and writes it, tagged spec.Ref, as a
// docker-archive tarball at path (through a temporary file, so a failed build leaves no
// half-written tarball). It returns the tarball's size.
func Write(spec Spec, path string) (int64, error) {
	ref, err := name.NewTag(spec.Ref, name.StrictValidation)
	if err != nil {
		return 0, fmt.Errorf("image reference %q: %w", spec.Ref, err)
	}
	layerTar, err := os.CreateTemp(filepath.Dir(path), ".layer-*.tmp")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.Remove(layerTar.Name()) }()
	// The file tree of the layer; go-containerregistry compresses it and writes the manifest.
	tw := tar.NewWriter(layerTar)
	if err := tw.AddFS(os.DirFS(spec.RootFS)); err != nil {
		_ = layerTar.Close()
		return 0, fmt.Errorf("archiving %s: %w", spec.RootFS, err)
	}
	if err := tw.Close(); err != nil {
		_ = layerTar.Close()
		return 0, err
	}
	if err := layerTar.Close(); err != nil {
		return 0, err
	}
	opts := []tarball.LayerOption{tarball.WithCompressedCaching}
	if spec.FastCompression {
		opts = append(opts, tarball.WithCompressionLevel(gzip.BestSpeed))
	}
	layer, err := tarball.LayerFromFile(layerTar.Name(), opts...)
	if err != nil {
		return 0, err
	}
	base := empty.Image
	if spec.Base != "" {
		if base, err = tarball.ImageFromPath(spec.Base, nil); err != nil {
			return 0, fmt.Errorf("the base image %s: %w", spec.Base, err)
		}
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return 0, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return 0, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = spec.Config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
