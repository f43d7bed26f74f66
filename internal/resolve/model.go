package resolve

import (
	"fmt"
	"path"
	"regexp"
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

// Model decides where the weights of a spec are, and refuses a hub model that names no commit.
func Model(spec *hicachev1alpha1.HiCacheDeploymentSpec) (ModelPlacement, error) {
	p, err := placeModel(spec)
	if err != nil {
		return p, err
	}
	m := spec.Model
	switch {
	case m.Source == nil && IsHubID(m.Path):
		err = checkCommit("spec.model.revision", m.Revision, fmt.Sprintf("spec.model.path %q is a hub id (not an absolute path), which SGLang downloads when each rank starts", m.Path),
			"or serve a local path: an absolute one (weights in the image) or spec.model.source")
	case m.Source != nil && m.Source.Hub != nil:
		err = checkCommit("spec.model.revision", m.Revision, fmt.Sprintf("spec.model.source.hub downloads %s when each rank pod starts", m.Source.Hub.Repo), "")
	}
	if err != nil {
		return ModelPlacement{}, err
	}
	return p, nil
}

// placeModel is Model without the check of the revision.
func placeModel(spec *hicachev1alpha1.HiCacheDeploymentSpec) (ModelPlacement, error) {
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

// commitRevision is a hub commit: 40 lowercase hex characters. A branch or a tag names whatever
// commit it points at when it is read.
var commitRevision = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit tells whether a revision is a hub commit.
func IsCommit(rev string) bool { return commitRevision.MatchString(rev) }

// IsHubID tells whether a model path SGLang is given is a hub id: SGLang loads a directory that
// exists and downloads anything else from the hub. Only an absolute path is known not to be a hub
// id (a relative one that happens to exist in the server's working directory is loaded from it,
// which the operator cannot see), so every other path is taken for one.
func IsHubID(p string) bool { return !strings.HasPrefix(p, "/") }

// checkCommit refuses a revision that is not a commit for a model the hub serves: a branch or a
// tag (main, v1.0) can move to other weights while the spec stays the same, so ranks started
// before and after the move would write two layouts under one L3 namespace (the namespace is
// chosen from the spec, the bytes from what was downloaded). what says which download it is
// for, orElse the other way out ("" for none).
func checkCommit(field, rev, what, orElse string) error {
	if IsCommit(rev) {
		return nil
	}
	got := "is required"
	if rev != "" {
		got = fmt.Sprintf("%q is a branch or a tag, not a commit", rev)
	}
	if orElse != "" {
		orElse = ", " + orElse
	}
	return &FieldError{Field: field, Message: fmt.Sprintf(
		"%s: %s, and a branch or a tag such as main can move to other weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit (40 lowercase hex characters) the branch or tag points at%s",
		got, what, orElse)}
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

// checkDraftRevision refuses a hub draft checkpoint (spec.topology.draft.modelPath that is not an
// absolute path) without a commit: SGLang 0.5.23 downloads it when each rank starts, at main
// when no revision is given (arg_groups/speculative_hook.py), and a revision without a draft
// path, which SGLang would not read as the spec says: without a draft path the draft is the
// model's own checkpoint at spec.model.revision.
func checkDraftRevision(spec *hicachev1alpha1.HiCacheDeploymentSpec) error {
	d := spec.Topology.Draft
	if d == nil {
		return nil
	}
	if d.ModelPath == "" {
		if d.Revision != "" {
			return &FieldError{Field: "spec.topology.draft.revision", Message: "is the revision of spec.topology.draft.modelPath, which is not set: without it SGLang reads the draft from the model's own checkpoint at spec.model.revision; remove revision or set modelPath"}
		}
		return nil
	}
	if !IsHubID(d.ModelPath) {
		return nil
	}
	return checkCommit("spec.topology.draft.revision", d.Revision,
		fmt.Sprintf("spec.topology.draft.modelPath %q is a hub id (not an absolute path), which SGLang downloads when each rank starts (at main without a revision)", d.ModelPath),
		"or serve the draft from a local path (an absolute one)")
}
