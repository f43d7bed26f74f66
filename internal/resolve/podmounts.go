package resolve

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// The volumes of a rank pod can change the bytes SGLang reads (its weights, its code, its
// configuration, the files its flags name) without any field the layout facts come from
// changing. The rule is by construction, deny by default:
//
//   - a volume the user mounts into the serving container is neutral only when it is an emptyDir
//     (empty when the pod starts) mounted at or below one of NeutralMountPoints, where the
//     pinned release and the image keep nothing SGLang reads as code, configuration or
//     weights; then all SGLang can find there is what its own processes wrote;
//   - every other mount is a layout fact (mount.<path>): the volume's source as written (a
//     claim's name, a ConfigMap's or Secret's name and items, a host path, an image
//     reference, ...) and how it is mounted (subPath, readOnly, propagation). A per-pod
//     subPathExpr is refused there, since it gives each pod other files under one namespace;
//   - an init container or sidecar may not mount writable a volume the serving container
//     mounts (or one that may be the same storage: the same claim, an overlapping host path):
//     what it writes there SGLang reads, and nothing in the spec says what that is;
//   - a file-valued flag of spec.template.extraArgs that SGLang reads (extra_args.txt marks
//     them "file:") may not name a file on a volume made at run time (an emptyDir, a generic
//     ephemeral volume without a data source, the operator's shared memory, configuration or
//     RDMA devices): elsewhere the file lies in the image (a layout fact through the image),
//     in the model source (through the model's identity) or on a mounted volume (through that
//     mount's fact).
//
// The content behind a reference (a ConfigMap's data, a claim's files) is not read: change the
// reference (a new ConfigMap name, a new claim) when the content changes.

// NeutralMountPoint is a path where an emptyDir of the user's may be mounted into the serving
// container without being a layout fact, with why nothing SGLang reads lives there.
type NeutralMountPoint struct {
	Path, Reason string
}

// NeutralMountPoints are the paths (and everything below them) where an emptyDir mounted into
// the serving container is neutral. The operator's own /dev/shm is not among them: it is
// reserved (ReservedMountPaths).
var NeutralMountPoints = []NeutralMountPoint{
	{"/tmp", "scratch space: empty in the SGLang images; SGLang and its libraries write sockets, locks and temporary files there and read back only what the same pod wrote"},
	{"/var/tmp", "scratch space, like /tmp: the images keep nothing there that SGLang reads"},
	{"/var/log", "log files: SGLang writes logs (where told to), it reads none; what the image keeps there (package manager logs) is never read by the server"},
	{"/root/.cache/sglang", "the pinned release's kernel caches (SGLANG_CACHE_DIR's default for the images' root user; Triton, Inductor, CUDA, TileLang and FlashInfer are pointed below it): compiled kernels keyed by their sources, which an empty cache compiles again, as every cold pod does"},
}

// neutralMountPoint returns the neutral mount point at or above p.
func neutralMountPoint(p string) (NeutralMountPoint, bool) {
	p = path.Clean(p)
	for _, n := range NeutralMountPoints {
		if p == n.Path || strings.HasPrefix(p, n.Path+"/") {
			return n, true
		}
	}
	return NeutralMountPoint{}, false
}

// NeutralMountPaths lists the neutral mount points, for messages.
func NeutralMountPaths() string {
	out := make([]string, 0, len(NeutralMountPoints))
	for _, n := range NeutralMountPoints {
		out = append(out, n.Path)
	}
	return strings.Join(out, ", ")
}

// MountIsNeutral tells whether a volume of the user's mounted into the serving container at
// mountPath leaves the layout alone: an emptyDir at or below a neutral mount point.
func MountIsNeutral(v corev1.VolumeSource, mountPath string) bool {
	_, at := neutralMountPoint(mountPath)
	return at && v.EmptyDir != nil
}

// MountIdentity is the layout fact of a volume mounted into the serving container: the
// volume's source as written (an emptyDir's size limit left out: capacity) and how it is
// mounted.
func MountIdentity(v corev1.VolumeSource, m corev1.VolumeMount) string {
	src := v.DeepCopy()
	if src.EmptyDir != nil {
		src.EmptyDir.SizeLimit = nil
	}
	b, _ := json.Marshal(struct {
		Volume           *corev1.VolumeSource          `json:"volume"`
		SubPath          string                        `json:"subPath,omitempty"`
		ReadOnly         bool                          `json:"readOnly,omitempty"`
		RecursiveRO      *corev1.RecursiveReadOnlyMode `json:"recursiveReadOnly,omitempty"`
		MountPropagation *corev1.MountPropagationMode  `json:"mountPropagation,omitempty"`
	}{src, m.SubPath, m.ReadOnly, m.RecursiveReadOnly, m.MountPropagation})
	return string(b)
}

// readOnlySource tells whether the kubelet mounts a volume read-only whatever the mount says:
// ConfigMaps, Secrets, the downward API, projections and image volumes always, and a claim, an
// NFS export or a CSI volume whose source says readOnly.
func readOnlySource(v corev1.VolumeSource) bool {
	switch {
	case v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil || v.Image != nil:
		return true
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ReadOnly
	case v.NFS != nil:
		return v.NFS.ReadOnly
	case v.CSI != nil:
		return v.CSI.ReadOnly != nil && *v.CSI.ReadOnly
	}
	return false
}

// WritesVolume tells whether a container's mount can change the volume's files: a mount not
// read-only of a writable kind, or one whose changes propagate back (Bidirectional).
func WritesVolume(v corev1.VolumeSource, m corev1.VolumeMount) bool {
	if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
		return true
	}
	return !m.ReadOnly && !readOnlySource(v)
}

// madeAtRunTime tells whether a volume's content is made when the pod runs, with nothing in
// the spec naming it: an emptyDir, or a generic ephemeral volume without a data source.
func madeAtRunTime(v corev1.VolumeSource) bool {
	if v.EmptyDir != nil {
		return true
	}
	if e := v.Ephemeral; e != nil {
		t := e.VolumeClaimTemplate
		return t == nil || (t.Spec.DataSource == nil && t.Spec.DataSourceRef == nil)
	}
	return false
}

// mayAlias tells whether two volumes of a pod may be the same storage under two names: the
// same claim, overlapping host paths or NFS exports, or two volumes of another shared kind
// (CSI, iSCSI, ...), which the operator does not tell apart. emptyDirs, ephemeral volumes and
// the read-only kinds are each their own.
func mayAlias(a, b corev1.VolumeSource) bool {
	overlap := func(x, y string) bool {
		x, y = path.Clean(x), path.Clean(y)
		return x == y || strings.HasPrefix(x, strings.TrimSuffix(y, "/")+"/") || strings.HasPrefix(y, strings.TrimSuffix(x, "/")+"/")
	}
	switch {
	case a.EmptyDir != nil || b.EmptyDir != nil || a.Ephemeral != nil || b.Ephemeral != nil ||
		a.ConfigMap != nil || b.ConfigMap != nil || a.Secret != nil || b.Secret != nil || a.DownwardAPI != nil || b.DownwardAPI != nil ||
		a.Projected != nil || b.Projected != nil || a.Image != nil || b.Image != nil:
		return false
	case a.PersistentVolumeClaim != nil || b.PersistentVolumeClaim != nil:
		return a.PersistentVolumeClaim != nil && b.PersistentVolumeClaim != nil && a.PersistentVolumeClaim.ClaimName == b.PersistentVolumeClaim.ClaimName
	case a.HostPath != nil || b.HostPath != nil:
		return a.HostPath != nil && b.HostPath != nil && overlap(a.HostPath.Path, b.HostPath.Path)
	case a.NFS != nil || b.NFS != nil:
		return a.NFS != nil && b.NFS != nil && a.NFS.Server == b.NFS.Server && overlap(a.NFS.Path, b.NFS.Path)
	}
	ka, kb := sourceKind(a), sourceKind(b)
	return ka == kb
}

// sourceKind is the JSON name of a volume source's kind ("persistentVolumeClaim", ...).
func sourceKind(v corev1.VolumeSource) string {
	b, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	for k := range m {
		return k
	}
	return ""
}

// servingVolume is a volume the serving container mounts.
type servingVolume struct {
	name, mountPath string
	source          corev1.VolumeSource
	// owner says whose it is: "" for the user's, else what the operator mounts there.
	owner string
}

// operatorVolumes are the operator's volumes of the serving container, as the renderer makes
// them (internal/controller/hicachedeployment/hcd_builders.go).
func operatorVolumes(spec *hicachev1alpha1.HiCacheDeploymentSpec) []servingVolume {
	out := []servingVolume{
		{name: "dshm", mountPath: "/dev/shm", owner: "shared memory", source: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{name: "hicache", mountPath: "/etc/hicache", owner: "rendered cache configuration", source: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		{name: "infiniband", mountPath: "/dev/infiniband", owner: "RDMA devices", source: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/infiniband"}}},
	}
	if src := spec.Model.Source; src != nil {
		m := servingVolume{name: "model", mountPath: hicachev1alpha1.ModelMountPath, owner: "model source"}
		switch {
		case src.PVC != nil:
			m.source.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.PVC.ClaimName}
		case src.HostPath != nil:
			m.source.HostPath = &corev1.HostPathVolumeSource{Path: src.HostPath.Path}
		default:
			m.source.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
		out = append(out, m)
	}
	return out
}

// podMounts checks the volumes of spec.template against the rule above and returns the layout
// facts of the serving container's mounts (mount path → identity).
func podMounts(spec *hicachev1alpha1.HiCacheDeploymentSpec, release string) (map[string]string, error) {
	t := &spec.Template
	volumes := map[string]corev1.VolumeSource{}
	for _, v := range t.Volumes {
		volumes[v.Name] = v.VolumeSource
	}
	serving := operatorVolumes(spec)
	for _, v := range serving {
		if _, user := volumes[v.name]; !user {
			volumes[v.name] = v.source
		}
	}
	var facts map[string]string
	for i, m := range t.VolumeMounts {
		src, ok := volumes[m.Name]
		if !ok {
			continue // checkPodOverrides refuses it
		}
		serving = append(serving, servingVolume{name: m.Name, mountPath: m.MountPath, source: src})
		if MountIsNeutral(src, m.MountPath) {
			continue
		}
		field := fmt.Sprintf("spec.template.volumeMounts[%d]", i)
		if m.SubPathExpr != "" {
			return nil, &FieldError{Field: field + ".subPathExpr", Message: fmt.Sprintf(
				"mounts a per-pod directory of volume %q at %s, where SGLang may read weights, code or configuration: each pod would read other files under one L3 namespace; write the directory in subPath, or mount an emptyDir at one of the neutral mount points (%s)",
				m.Name, m.MountPath, NeutralMountPaths())}
		}
		if facts == nil {
			facts = map[string]string{}
		}
		facts[path.Clean(m.MountPath)] = MountIdentity(src, m)
	}
	if err := checkOtherContainers(t, volumes, serving); err != nil {
		return nil, err
	}
	if err := checkFileArgs(t.ExtraArgs, release, serving); err != nil {
		return nil, err
	}
	return facts, nil
}

// checkOtherContainers refuses an init container or sidecar that mounts writable a volume the
// serving container mounts, or one that may be the same storage.
func checkOtherContainers(t *hicachev1alpha1.PodOverrides, volumes map[string]corev1.VolumeSource, serving []servingVolume) error {
	for _, list := range []struct {
		field string
		cs    []corev1.Container
	}{{"spec.template.initContainers", t.InitContainers}, {"spec.template.containers", t.Containers}} {
		for i, c := range list.cs {
			for j, m := range c.VolumeMounts {
				field := fmt.Sprintf("%s[%d].volumeMounts[%d]", list.field, i, j)
				src, ok := volumes[m.Name]
				if !ok {
					return &FieldError{Field: field, Message: fmt.Sprintf(
						"mounts volume %q, which spec.template.volumes does not define: add it to spec.template.volumes", m.Name)}
				}
				if !WritesVolume(src, m) {
					continue
				}
				for _, s := range serving {
					same := s.name == m.Name
					if !same && !mayAlias(src, s.source) {
						continue
					}
					whose := "the serving container mounts at " + s.mountPath
					if s.owner != "" {
						whose = "the operator mounts into the serving container at " + s.mountPath + " (" + s.owner + ")"
					}
					if !same {
						whose = fmt.Sprintf("may be the same storage as volume %q, which %s", s.name, whose)
					} else {
						whose = "which " + whose
					}
					return &FieldError{Field: field, Message: fmt.Sprintf(
						"mounts volume %q writable (%s, not readOnly), %s: whatever %s writes there SGLang reads, and the operator cannot know it when it chooses the L3 namespace; mount it with readOnly: true, give %s a volume the serving container does not mount, or put the files in the image, a claim or a ConfigMap the serving container mounts",
						m.Name, m.MountPath, whose, c.Name, c.Name)}
				}
			}
		}
	}
	return nil
}

// FileValuedArgs are the flags of the pinned release whose value is a file or directory SGLang
// reads (extra_args.txt marks them "file:"), sorted.
func FileValuedArgs() []string {
	rules, err := sglang.ArgRules()
	if err != nil {
		return nil
	}
	var out []string
	for f, r := range rules {
		if r.ReadsFile {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// checkFileArgs refuses a file-valued extra argument that names a path on a volume made at run
// time or on one of the operator's volumes.
func checkFileArgs(args []string, release string, serving []servingVolume) error {
	if len(args) == 0 {
		return nil
	}
	spec, err := argspec.ForRelease(release)
	if err != nil {
		return nil // ClassifyExtraArgsFor reports it
	}
	rules, err := sglang.ArgRules()
	if err != nil {
		return nil
	}
	occ, _ := spec.Parse(args)
	for _, o := range occ {
		flag := o.Argument.Flags[0]
		if !rules[flag].ReadsFile {
			continue
		}
		for _, v := range o.Values {
			for _, p := range filePaths(v) {
				s, ok := coveringMount(serving, p)
				if !ok {
					continue // in the image, a layout fact through it
				}
				switch {
				case s.owner == "model source":
					continue // the model's identity is a layout fact
				case s.owner != "":
					return &FieldError{Field: "spec.template.extraArgs", Message: fmt.Sprintf(
						"sets %s %s, which SGLang reads, on the operator's %s mounted at %s: the operator writes that volume for its own use; put the file in the image, or on a claim, ConfigMap or Secret mounted with spec.template.volumeMounts",
						o.Flag, p, s.owner, s.mountPath)}
				case madeAtRunTime(s.source):
					return &FieldError{Field: "spec.template.extraArgs", Message: fmt.Sprintf(
						"sets %s %s, which SGLang reads, on volume %q mounted at %s, whose content is made when the pod runs (%s): nothing in the spec says what SGLang would read, and the L3 namespace cannot follow it; put the file in the image, or on a claim, ConfigMap, Secret or image volume mounted there (their identity is a layout fact)",
						o.Flag, p, s.name, s.mountPath, sourceKind(s.source))}
				}
			}
		}
	}
	return nil
}

// filePaths are the absolute paths a value of a file-valued flag may name: the value, the part
// after "name=" (--lora-paths name=path), and a "lora_path" of a JSON object.
func filePaths(v string) []string {
	var out []string
	add := func(p string) {
		if strings.HasPrefix(p, "/") && !slices.Contains(out, p) {
			out = append(out, path.Clean(p))
		}
	}
	add(v)
	if _, after, ok := strings.Cut(v, "="); ok {
		add(after)
	}
	var obj map[string]any
	if json.Unmarshal([]byte(v), &obj) == nil {
		if s, ok := obj["lora_path"].(string); ok {
			add(s)
		}
	}
	return out
}

// coveringMount is the serving container's mount that holds p: the one with the longest mount
// path at or above it.
func coveringMount(serving []servingVolume, p string) (servingVolume, bool) {
	var best servingVolume
	found := false
	for _, s := range serving {
		mp := path.Clean(s.mountPath)
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && (!found || len(mp) > len(path.Clean(best.mountPath))) {
			best, found = s, true
		}
	}
	return best, found
}
