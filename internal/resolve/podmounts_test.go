package resolve_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func pvc(claim string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}
}

func configMap(name string) corev1.VolumeSource {
	return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

var emptyDir = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}

func vol(name string, src corev1.VolumeSource) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: src}
}

func mnt(name, at string) corev1.VolumeMount { return corev1.VolumeMount{Name: name, MountPath: at} }

func roMnt(name, at string) corev1.VolumeMount {
	return corev1.VolumeMount{Name: name, MountPath: at, ReadOnly: true}
}

// The serving container's mounts: an emptyDir at a neutral mount point is no fact; every other
// mount is one, by its path, with the volume's identity.
func TestServingMountsAreLayoutFactsOutsideNeutralPoints(t *testing.T) {
	cases := map[string]struct {
		tmpl hicachev1alpha1.PodOverrides
		// want are the mount facts (path → a part of the value); none when empty.
		want map[string]string
	}{
		"no mount": {},
		"an emptyDir at /tmp": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("scratch", emptyDir)}, VolumeMounts: []corev1.VolumeMount{mnt("scratch", "/tmp")}}},
		"an emptyDir below /var/log and at the kernel cache": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("logs", emptyDir), vol("kernels", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}})},
			VolumeMounts: []corev1.VolumeMount{mnt("logs", "/var/log/sglang"), mnt("kernels", "/root/.cache/sglang")}}},
		"a claim over the model path": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("weights", pvc("qwen3-a"))}, VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")}},
			want: map[string]string{"/data": `"claimName":"qwen3-a"`}},
		"a claim at /tmp is not an emptyDir": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("scratch", pvc("scratch"))}, VolumeMounts: []corev1.VolumeMount{mnt("scratch", "/tmp")}},
			want: map[string]string{"/tmp": `"claimName":"scratch"`}},
		"an emptyDir over SGLang's install": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("code", emptyDir)}, VolumeMounts: []corev1.VolumeMount{mnt("code", "/sgl-workspace")}},
			want: map[string]string{"/sgl-workspace": `"emptyDir":{}`}},
		"a ConfigMap over the site-packages, with its sub-path": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("patch", configMap("sglang-patch"))},
			VolumeMounts: []corev1.VolumeMount{{Name: "patch", MountPath: "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", SubPath: "server_args.py"}}},
			want: map[string]string{"/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py": `"subPath":"server_args.py"`}},
		"/tmpfoo is not below /tmp": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("x", emptyDir)}, VolumeMounts: []corev1.VolumeMount{mnt("x", "/tmpfoo")}},
			want: map[string]string{"/tmpfoo": `"emptyDir"`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("q").TP(4).Obj()
			h.Spec.Template = tc.tmpl
			r, err := resolve.Resolve(h)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			got := map[string]string{}
			for k, v := range r.Facts {
				if p, ok := strings.CutPrefix(k, cache.FactMountPrefix); ok {
					got[p] = v
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("mount facts %v, want %d of them (%v)", got, len(tc.want), tc.want)
			}
			for p, part := range tc.want {
				if !strings.Contains(got[p], part) {
					t.Errorf("fact mount.%s = %q, want it to hold %s", p, got[p], part)
				}
			}
		})
	}
}

// Two specs that differ only in what is mounted over the model path run under two namespaces;
// specs that differ only in a neutral mount share one.
func TestMountChangesMoveTheNamespace(t *testing.T) {
	with := func(v corev1.Volume, m corev1.VolumeMount) string {
		h := makeHCD("q").TP(4).Storage("mooncake").Obj()
		h.Spec.Model.Path = "/data/qwen3"
		h.Spec.Template.Volumes = []corev1.Volume{v}
		h.Spec.Template.VolumeMounts = []corev1.VolumeMount{m}
		r, err := resolve.Resolve(h)
		if err != nil {
			t.Fatal(err)
		}
		return r.Namespace
	}
	a := with(vol("weights", pvc("qwen3-a")), roMnt("weights", "/data"))
	b := with(vol("weights", pvc("qwen3-b")), roMnt("weights", "/data"))
	sub := with(vol("weights", pvc("qwen3-a")), corev1.VolumeMount{Name: "weights", MountPath: "/data", ReadOnly: true, SubPath: "v2"})
	if a == b || a == sub {
		t.Errorf("namespaces %s (claim a), %s (claim b), %s (claim a, sub-path v2): another volume over the model path must move the namespace", a, b, sub)
	}
	tmp1 := with(vol("scratch", emptyDir), mnt("scratch", "/tmp"))
	tmp2 := with(vol("s2", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}), mnt("s2", "/var/tmp"))
	h := makeHCD("q").TP(4).Storage("mooncake").Obj()
	h.Spec.Model.Path = "/data/qwen3"
	none, err := resolve.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if tmp1 != none.Namespace || tmp2 != none.Namespace {
		t.Errorf("namespaces %s and %s with a neutral emptyDir, %s without: a neutral mount must keep the namespace", tmp1, tmp2, none.Namespace)
	}
}

// What the resolver refuses: per-pod sub-paths outside the neutral points, other containers
// writing what SGLang reads, file-valued flags on volumes made at run time.
func TestResolveRefusesMountsSGLangCouldReadUnseen(t *testing.T) {
	bidir := corev1.MountPropagationBidirectional
	cases := map[string]struct {
		tmpl      hicachev1alpha1.PodOverrides
		model     *hicachev1alpha1.ModelSource
		wantField string // "" when accepted
		wantText  []string
	}{
		"a per-pod sub-path over the weights": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("weights", pvc("w"))},
			VolumeMounts: []corev1.VolumeMount{{Name: "weights", MountPath: "/data", SubPathExpr: "$(POD_NAME)"}}},
			wantField: "spec.template.volumeMounts[0].subPathExpr", wantText: []string{"per-pod directory", "write the directory in subPath"}},
		"a per-pod sub-path of a neutral emptyDir": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("scratch", emptyDir)},
			VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/tmp", SubPathExpr: "$(POD_NAME)"}}}},
		"an init container filling the model directory": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:        []corev1.Volume{vol("weights", emptyDir)},
			VolumeMounts:   []corev1.VolumeMount{mnt("weights", "/data")},
			InitContainers: []corev1.Container{{Name: "fetch", Image: "s5cmd", VolumeMounts: []corev1.VolumeMount{mnt("weights", "/out")}}}},
			wantField: "spec.template.initContainers[0].volumeMounts[0]",
			wantText:  []string{`mounts volume "weights" writable (/out, not readOnly)`, "which the serving container mounts at /data", "mount it with readOnly: true"}},
		"an init container reading the weights": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:        []corev1.Volume{vol("weights", pvc("w"))},
			VolumeMounts:   []corev1.VolumeMount{roMnt("weights", "/data")},
			InitContainers: []corev1.Container{{Name: "check", Image: "busybox", VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")}}}}},
		"an init container mounting a read-only claim without readOnly": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:        []corev1.Volume{vol("weights", pvc("w"))},
			VolumeMounts:   []corev1.VolumeMount{roMnt("weights", "/data")},
			InitContainers: []corev1.Container{{Name: "check", Image: "busybox", VolumeMounts: []corev1.VolumeMount{mnt("weights", "/data")}}}}},
		"an init container mounting a writable claim": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:        []corev1.Volume{vol("weights", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "w"}})},
			VolumeMounts:   []corev1.VolumeMount{roMnt("weights", "/data")},
			InitContainers: []corev1.Container{{Name: "fix", Image: "busybox", VolumeMounts: []corev1.VolumeMount{mnt("weights", "/data")}}}},
			wantField: "spec.template.initContainers[0].volumeMounts[0]", wantText: []string{"which the serving container mounts at /data"}},
		"a sidecar writing the neutral log directory": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("logs", emptyDir)},
			VolumeMounts: []corev1.VolumeMount{mnt("logs", "/var/log/sglang")},
			Containers:   []corev1.Container{{Name: "rotate", Image: "logrotate", VolumeMounts: []corev1.VolumeMount{mnt("logs", "/logs")}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{"which the serving container mounts at /var/log/sglang"}},
		"a sidecar reading the logs": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("logs", emptyDir)},
			VolumeMounts: []corev1.VolumeMount{mnt("logs", "/var/log/sglang")},
			Containers:   []corev1.Container{{Name: "ship", Image: "fluent-bit", VolumeMounts: []corev1.VolumeMount{roMnt("logs", "/logs")}}}}},
		"a sidecar mounting a ConfigMap the server reads (always read-only)": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("tpl", configMap("templates"))},
			VolumeMounts: []corev1.VolumeMount{roMnt("tpl", "/templates")},
			Containers:   []corev1.Container{{Name: "side", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("tpl", "/t")}}}}},
		"a sidecar propagating mounts into the weights": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("weights", pvc("w"))},
			VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")},
			Containers:   []corev1.Container{{Name: "fuse", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "weights", MountPath: "/w", ReadOnly: true, MountPropagation: &bidir}}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{`mounts volume "weights" writable`}},
		"a sidecar writing the same claim under another volume name": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("weights", pvc("w")), vol("w-rw", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "w"}})},
			VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")},
			Containers:   []corev1.Container{{Name: "sync", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("w-rw", "/w")}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{`may be the same storage as volume "weights"`}},
		"a sidecar writing a host path above the weights' host path": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{
				vol("weights", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/models/qwen3"}}),
				vol("srv", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv"}})},
			VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")},
			Containers:   []corev1.Container{{Name: "sync", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("srv", "/srv")}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{`may be the same storage as volume "weights"`}},
		"a sidecar writing a host path beside the weights'": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{
				vol("weights", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/models"}}),
				vol("out", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/modelsout"}})},
			VolumeMounts: []corev1.VolumeMount{roMnt("weights", "/data")},
			Containers:   []corev1.Container{{Name: "sync", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("out", "/out")}}}}},
		"a sidecar writing the operator's shared memory": {tmpl: hicachev1alpha1.PodOverrides{
			Containers: []corev1.Container{{Name: "shm", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("dshm", "/dev/shm")}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{"the operator mounts into the serving container at /dev/shm (shared memory)"}},
		"an init container writing the model source's claim": {
			model: &hicachev1alpha1.ModelSource{PVC: &hicachev1alpha1.ClaimModelSource{ClaimName: "qwen3"}},
			tmpl: hicachev1alpha1.PodOverrides{
				Volumes:        []corev1.Volume{vol("rw", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "qwen3"}})},
				InitContainers: []corev1.Container{{Name: "fix", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("rw", "/w")}}}},
			wantField: "spec.template.initContainers[0].volumeMounts[0]", wantText: []string{`may be the same storage as volume "model"`, "(model source)"}},
		"a sidecar's mount of a volume not defined": {tmpl: hicachev1alpha1.PodOverrides{
			Containers: []corev1.Container{{Name: "side", Image: "x", VolumeMounts: []corev1.VolumeMount{mnt("nope", "/n")}}}},
			wantField: "spec.template.containers[0].volumeMounts[0]", wantText: []string{`mounts volume "nope", which spec.template.volumes does not define`}},
		"KV scales on a claim": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("scales", pvc("s"))}, VolumeMounts: []corev1.VolumeMount{roMnt("scales", "/scales")},
			ExtraArgs: []string{"--quantization-param-path", "/scales/kv.json"}}},
		"KV scales in the image": {tmpl: hicachev1alpha1.PodOverrides{ExtraArgs: []string{"--quantization-param-path", "/opt/kv.json"}}},
		"KV scales on a neutral emptyDir": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("scratch", emptyDir)}, VolumeMounts: []corev1.VolumeMount{mnt("scratch", "/tmp")},
			ExtraArgs: []string{"--quantization-param-path=/tmp/kv.json"}},
			wantField: "spec.template.extraArgs", wantText: []string{"sets --quantization-param-path /tmp/kv.json, which SGLang reads, on volume \"scratch\" mounted at /tmp", "made when the pod runs (emptyDir)", "ConfigMap"}},
		"a chat template on the operator's configuration": {tmpl: hicachev1alpha1.PodOverrides{ExtraArgs: []string{"--chat-template", "/etc/hicache/x.jinja"}},
			wantField: "spec.template.extraArgs", wantText: []string{"on the operator's rendered cache configuration mounted at /etc/hicache"}},
		"a chat template by name": {tmpl: hicachev1alpha1.PodOverrides{ExtraArgs: []string{"--chat-template", "chatml"}}},
		"a LoRA adapter on a generic ephemeral volume": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{vol("eph", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}})},
			VolumeMounts: []corev1.VolumeMount{mnt("eph", "/lora")}, ExtraArgs: []string{"--enable-lora", "--lora-paths", "a=/lora/a"}},
			wantField: "spec.template.extraArgs", wantText: []string{"sets --lora-paths /lora/a", "(ephemeral)"}},
		"a draft config on the model source": {
			model: &hicachev1alpha1.ModelSource{PVC: &hicachev1alpha1.ClaimModelSource{ClaimName: "qwen3"}},
			tmpl:  hicachev1alpha1.PodOverrides{ExtraArgs: []string{"--decrypted-config-file", "/models/config.json"}}},
		"a TLS key on an emptyDir (neutral flag)": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{vol("tls", emptyDir)}, VolumeMounts: []corev1.VolumeMount{mnt("tls", "/tls")},
			ExtraArgs: []string{"--ssl-keyfile", "/tls/key.pem"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeHCD("q").TP(4).Obj()
			if tc.model != nil {
				h.Spec.Model = hicachev1alpha1.ModelSpec{Source: tc.model, ServedName: "qwen3"}
			}
			h.Spec.Template = tc.tmpl
			_, err := resolve.Resolve(h)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := err.(*resolve.FieldError)
			if !ok || fe.Field != tc.wantField {
				t.Fatalf("got %v; want a FieldError on %s", err, tc.wantField)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(fe.Message, w) {
					t.Errorf("message %q lacks %q", fe.Message, w)
				}
			}
		})
	}
}

// Every flag marked file-valued exists in the pinned release and takes a value.
func TestFileValuedArgsTakeAValue(t *testing.T) {
	files := resolve.FileValuedArgs()
	for _, want := range []string{"--chat-template", "--decrypted-config-file", "--kt-weight-path", "--lora-paths",
		"--modelopt-checkpoint-restore-path", "--quantization-param-path", "--tokenizer-path"} {
		if !strings.Contains(strings.Join(files, " "), want) {
			t.Errorf("file-valued flags %v lack %s", files, want)
		}
	}
	h := makeHCD("q").TP(4).Obj()
	for _, f := range files {
		h.Spec.Template.ExtraArgs = []string{f, "/opt/x"}
		if f == "--lora-paths" {
			h.Spec.Template.ExtraArgs = append([]string{"--enable-lora"}, h.Spec.Template.ExtraArgs...)
		}
		if _, err := resolve.Resolve(h); err != nil {
			t.Errorf("%s /opt/x (a file in the image) refused: %v", f, err)
		}
	}
}
