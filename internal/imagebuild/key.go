// Package imagebuild builds the local images of internal/images with go-containerregistry, into
// docker-archive tarballs that `ctr images import` and `docker load` accept, and holds the pure
// decisions around it: cache keys, the pin and mirror the Mooncake rootfs is built from, and the
// Dockerfiles the images must agree with.
package imagebuild

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
)

// Input is one named thing an image is built from: a source file, a pin, a build flag, the image
// config.
type Input struct {
	Name string
	Data []byte
}

// Key is the content key of a build: the same inputs, in any order, give the same key; any change
// of a name or of content gives another. Names and contents are length-prefixed, so moving bytes
// from one input to the next changes the key too.
func Key(inputs []Input) string {
	sorted := slices.Clone(inputs)
	slices.SortStableFunc(sorted, func(a, b Input) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	var n [8]byte
	for _, in := range sorted {
		for _, b := range [][]byte{[]byte(in.Name), in.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
