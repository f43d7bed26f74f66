package resolve

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// What the operator owns in every rank pod, which spec.template may not change. The CRD's CEL
// rules on spec.template restate these lists for the API server; tests keep the three (these
// lists, the rules and what the controllers render) equal.
var (
	// ServingContainer is the name of the SGLang container.
	ServingContainer = "sglang"
	// GuardContainer is the name of the proxy in front of SGLang's HTTP server (internal/guard):
	// it owns the pod IP at SGLang's ports and takes the keys out of /server_info.
	GuardContainer = "guard"
	// ReservedContainers are the names of the operator's containers: the serving container, the
	// proxy in front of it and the init container that downloads a hub model source.
	ReservedContainers = []string{ServingContainer, GuardContainer, "model-download"}
	// ReservedVolumes are the operator's volumes: shared memory, the rendered cache
	// configuration, the model source, RDMA devices.
	ReservedVolumes = []string{"dshm", "hicache", "model", "infiniband"}
	// ReservedMountPaths are where the serving container mounts them; nothing may be mounted at
	// or below them. The model source's path (hicachev1alpha1.ModelMountPath) is reserved only
	// when spec.model.source is set.
	ReservedMountPaths = []string{"/dev/shm", "/etc/hicache", "/dev/infiniband"}
	// ReservedPorts are the serving container's: SGLang's HTTP API and the group's rendezvous.
	ReservedPorts = []int32{SGLangPort, DistInitPort}
)

// DistInitPort is the port of torch.distributed's rendezvous on a group's leader.
const DistInitPort = 20102

// checkPodOverrides refuses what CEL cannot judge within its cost budget (names compared across
// two lists of unbounded strings), so that a spec that would only fail when its StatefulSet is
// applied is refused before anything is written, with the field to change.
func checkPodOverrides(t *hicachev1alpha1.PodOverrides) error {
	volumes := make([]string, 0, len(t.Volumes))
	for _, v := range t.Volumes {
		volumes = append(volumes, v.Name)
	}
	for i, m := range t.VolumeMounts {
		if slices.Contains(volumes, m.Name) {
			continue
		}
		why := "add it to spec.template.volumes"
		if slices.Contains(ReservedVolumes, m.Name) {
			why = "it is the operator's own (" + strings.Join(ReservedVolumes, ", ") + "), mounted where the operator needs it; mount a volume of spec.template.volumes instead"
		}
		return &FieldError{Field: fmt.Sprintf("spec.template.volumeMounts[%d]", i), Message: fmt.Sprintf(
			"mounts volume %q, which spec.template.volumes does not define: %s", m.Name, why)}
	}
	for i, c := range t.InitContainers {
		if slices.ContainsFunc(t.Containers, func(s corev1.Container) bool { return s.Name == c.Name }) {
			return &FieldError{Field: fmt.Sprintf("spec.template.initContainers[%d]", i), Message: fmt.Sprintf(
				"is named %q like a container of spec.template.containers: every container of a pod needs its own name", c.Name)}
		}
	}
	return nil
}
