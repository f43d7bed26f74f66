package hicachedeployment

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

const (
	// modelVolume is the volume of a model source, mounted read-only at /models.
	modelVolume = "model"
	// hubDownloadContainer is the init container that downloads a hub model source.
	hubDownloadContainer = "model-download"
	// HubTokenEnv is the variable the hub CLI reads its token from.
	HubTokenEnv = "HF_TOKEN"
	// HealthGenerationEnv makes SGLang's /health a check of the server's state only, leaving the
	// one-token generation to /health_generate (SGLang 0.5.23 runs it on both by default).
	HealthGenerationEnv = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"

	// The HTTP paths the probes ask. Both exist on the leader's server and on the stand-in
	// server SGLang starts on followers once their schedulers are ready, and SGLang lets them
	// through without an API key (test/conformance checks all three in the pinned source).
	HealthPath         = "/health"
	HealthGeneratePath = "/health_generate"
)

// modelParts are what a model source adds to a rank pod: its volume, the serving container's
// read-only mount of it, and for a hub source the init container that downloads into it.
type modelParts struct {
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
	inits   []corev1.Container
}

// buildModelParts renders spec.model.source; nothing without one (spec.model.path is passed as
// it is).
func buildModelParts(spec *hicachev1alpha1.HiCacheDeploymentSpec, image string) (modelParts, error) {
	m, err := resolve.Model(spec)
	if err != nil || m.Source == nil {
		return modelParts{}, err
	}
	src := m.Source
	var p modelParts
	mount := corev1.VolumeMount{Name: modelVolume, MountPath: hicachev1alpha1.ModelMountPath, ReadOnly: true}
	switch {
	case src.PVC != nil:
		// Read-only on both sides: the claim is shared by every rank of every group.
		p.volumes = append(p.volumes, corev1.Volume{Name: modelVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.PVC.ClaimName, ReadOnly: true}}})
	case src.HostPath != nil:
		// Directory: a node without the cache fails the pod's start rather than serving an
		// empty directory the kubelet would create.
		p.volumes = append(p.volumes, corev1.Volume{Name: modelVolume, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: src.HostPath.Path, Type: ptr.To(corev1.HostPathDirectory)}}})
	case src.Hub != nil:
		hub := src.Hub
		p.volumes = append(p.volumes, corev1.Volume{Name: modelVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: hub.CacheSizeLimit}}})
		init := corev1.Container{
			Name:  hubDownloadContainer,
			Image: image,
			// The serving image's own hub CLI, checked against the pinned release's definitions.
			Command: hfcli.DownloadCommand(hub.Repo, spec.Model.Revision, m.Path),
			VolumeMounts: []corev1.VolumeMount{
				{Name: modelVolume, MountPath: hicachev1alpha1.ModelMountPath},
			},
			// It runs the serving image as the serving container does.
			SecurityContext: servingSecurity(spec.Template.SecurityContext, spec.Template.ContainerSecurityContext),
		}
		if ref := hub.TokenSecretRef; ref != nil {
			init.Env = []corev1.EnvVar{{Name: HubTokenEnv, ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key,
				}}}}
		}
		p.inits = append(p.inits, init)
	}
	p.mounts = append(p.mounts, mount)
	return p, nil
}

// rankProbes are the SGLang container's probes. One pod template serves the leader and the
// followers of a group, so the probes are the same on both:
//
//   - startup, GET /health every 10 s within the budget of resolve.StartupBudget: the leader
//     answers 503 until its warm-up request has run; a follower opens its port only once its
//     schedulers joined the process group and loaded their weights;
//   - readiness, GET /health every 10 s: with HealthGenerationEnv false, a check of the server's
//     state (503 while starting or shutting down), cheap enough to ask often;
//   - liveness, GET /health_generate every 30 s: on the leader a one-token generation, which no
//     rank of the group can finish alone, so a dead or hung follower fails it too (SGLang gives
//     up after 20 s, hence the 25 s timeout); it adds nothing while the server is busy, since any
//     output answers it. A follower's stand-in server answers it while its main process lives.
func rankProbes(startupSeconds int32) (startup, readiness, liveness *corev1.Probe) {
	get := func(path string) corev1.ProbeHandler {
		// By number: the port is the proxy's (GuardContainer), which the kubelet would not find
		// by name in this container; the proxy passes the probe to SGLang.
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(SGLangPort), Scheme: corev1.URISchemeHTTP}}
	}
	period := int32(resolve.StartupProbePeriod)
	startup = &corev1.Probe{
		ProbeHandler:  get(HealthPath),
		PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: max((startupSeconds+period-1)/period, 1),
	}
	readiness = &corev1.Probe{
		ProbeHandler:  get(HealthPath),
		PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3,
	}
	liveness = &corev1.Probe{
		ProbeHandler:  get(HealthGeneratePath),
		PeriodSeconds: 30, TimeoutSeconds: 25, FailureThreshold: 3,
	}
	return startup, readiness, liveness
}
