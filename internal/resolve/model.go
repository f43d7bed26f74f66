package resolve

import (
	"fmt"
	"path"
	"strings"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// ModelPlacement is where SGLang finds the weights of a deployment, and what identifies them.
type ModelPlacement struct {
	// Path is --model-path: spec.model.path as it is, or the mounted source's directory.
	Path string
	// Identity is the model as a layout fact: spec.model.path, the hub repository of a hub
	// source (so that a deployment moving between SGLang's own download and the operator's keeps
	// its namespace: same repository and revision, same bytes), or the claim or host path and
	// the directory in it.
	Identity string
	// Revision is passed to --revision: only with spec.model.path, since SGLang loads a mounted
	// directory as it is.
	Revision string
	// Source is the spec's source (nil: spec.model.path).
	Source *hicachev1alpha1.ModelSource
}

// Model decides where the weights of a spec are.
func Model(spec *hicachev1alpha1.HiCacheDeploymentSpec) (ModelPlacement, error) {
	m := spec.Model
	src := m.Source
	if src == nil {
		if strings.TrimSpace(m.Path) == "" {
			return ModelPlacement{}, &FieldError{Field: "spec.model", Message: "set path (weights inside the image, or a hub id SGLang downloads itself) or source (a claim, a host path or a hub download)"}
		}
		return ModelPlacement{Path: m.Path, Identity: m.Path, Revision: m.Revision}, nil
	}
	if m.Path != "" {
		return ModelPlacement{}, &FieldError{Field: "spec.model", Message: fmt.Sprintf(
			"path %q and source are both set: with a source, --model-path is where the operator mounts it; remove spec.model.path, or spec.model.source for an image that holds its weights", m.Path)}
	}
	n := 0
	for _, set := range []bool{src.PVC != nil, src.HostPath != nil, src.Hub != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return ModelPlacement{}, &FieldError{Field: "spec.model.source", Message: "set exactly one of pvc (a claim holding the weights), hostPath (a directory on every node) or hub (a download at start)"}
	}
	sub, err := cleanSubPath(src.SubPath)
	if err != nil {
		return ModelPlacement{}, err
	}
	p := ModelPlacement{Source: src, Path: path.Join(hicachev1alpha1.ModelMountPath, sub)}
	switch {
	case src.Hub != nil:
		if sub != "" {
			return ModelPlacement{}, &FieldError{Field: "spec.model.source.subPath", Message: "is the model's directory inside a claim or a host path; a hub download has its own directory: remove subPath"}
		}
		if strings.TrimSpace(m.Revision) == "" {
			return ModelPlacement{}, &FieldError{Field: "spec.model.revision", Message: "is required with a hub source: without it each pod downloads whatever the repository's main branch holds when it starts, and ranks could load different weights under one L3 namespace"}
		}
		p.Path, p.Identity = HubDownloadDir(src.Hub.Repo), src.Hub.Repo
	case src.PVC != nil:
		p.Identity = "pvc:" + path.Join(src.PVC.ClaimName, sub)
	default:
		p.Identity = "hostPath:" + path.Join(src.HostPath.Path, sub)
	}
	if src.Hub == nil && m.ServedName == "" {
		return ModelPlacement{}, &FieldError{Field: "spec.model.servedName", Message: "is required with a pvc or hostPath source: it names the model in the API and in every L3 key (the mount path would)"}
	}
	return p, nil
}

// cleanSubPath is a directory inside a volume, without leading or trailing slashes.
func cleanSubPath(sub string) (string, error) {
	sub = strings.Trim(sub, "/")
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return "", &FieldError{Field: "spec.model.source.subPath", Message: "may not contain '..': it names a directory inside the claim or the host path"}
		}
	}
	if sub == "." {
		return "", nil
	}
	return sub, nil
}

// HubDownloadDir is where a hub repository is downloaded, below the model mount.
func HubDownloadDir(repo string) string { return path.Join(hicachev1alpha1.ModelMountPath, repo) }

// Describe says in words where the server finds the weights.
func (m ModelPlacement) Describe() string {
	src := m.Source
	switch {
	case src == nil:
		return fmt.Sprintf("spec.model.path %s, passed to --model-path as it is (in the image, or downloaded by SGLang)", m.Path)
	case src.PVC != nil:
		return fmt.Sprintf("claim %s mounted read-only at %s; --model-path %s", src.PVC.ClaimName, hicachev1alpha1.ModelMountPath, m.Path)
	case src.HostPath != nil:
		return fmt.Sprintf("node directory %s mounted read-only at %s; --model-path %s", src.HostPath.Path, hicachev1alpha1.ModelMountPath, m.Path)
	default:
		token := "no token"
		if ref := src.Hub.TokenSecretRef; ref != nil {
			token = fmt.Sprintf("token from Secret %s key %s as HF_TOKEN", ref.Name, ref.Key)
		}
		return fmt.Sprintf("hub %s downloaded at each pod's start into an emptyDir (%s); --model-path %s", src.Hub.Repo, token, m.Path)
	}
}
