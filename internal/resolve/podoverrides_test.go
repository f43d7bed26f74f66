package resolve_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// What CEL leaves to the operator: names compared across two lists.
func TestResolveRefusesPodOverridesCELCannotJudge(t *testing.T) {
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	cases := map[string]struct {
		tmpl      hicachev1alpha1.PodOverrides
		wantField string // "" when accepted
		wantText  string
	}{
		"a mount of a defined volume": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes: []corev1.Volume{{Name: "w", VolumeSource: empty}}, VolumeMounts: []corev1.VolumeMount{{Name: "w", MountPath: "/models"}}}},
		"a mount of a volume not defined": {tmpl: hicachev1alpha1.PodOverrides{
			Volumes:      []corev1.Volume{{Name: "w", VolumeSource: empty}},
			VolumeMounts: []corev1.VolumeMount{{Name: "w", MountPath: "/models"}, {Name: "cache", MountPath: "/cache"}}},
			wantField: "spec.template.volumeMounts[1]", wantText: `mounts volume "cache", which spec.template.volumes does not define: add it to spec.template.volumes`},
		"a mount of the operator's volume": {tmpl: hicachev1alpha1.PodOverrides{VolumeMounts: []corev1.VolumeMount{{Name: "hicache", MountPath: "/config"}}},
			wantField: "spec.template.volumeMounts[0]", wantText: "it is the operator's own (dshm, hicache, model, infiniband)"},
		"sidecars and init containers of their own names": {tmpl: hicachev1alpha1.PodOverrides{
			Containers: []corev1.Container{{Name: "logs", Image: "x"}}, InitContainers: []corev1.Container{{Name: "fetch", Image: "y"}}}},
		"an init container named like a sidecar": {tmpl: hicachev1alpha1.PodOverrides{
			Containers: []corev1.Container{{Name: "logs", Image: "x"}}, InitContainers: []corev1.Container{{Name: "fetch", Image: "y"}, {Name: "logs", Image: "z"}}},
			wantField: "spec.template.initContainers[1]", wantText: `is named "logs" like a container of spec.template.containers`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := testutil.HCD("q").TP(4).Obj()
			h.Spec.Template = tc.tmpl
			_, err := resolve.Resolve(h)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := err.(*resolve.FieldError)
			if !ok || fe.Field != tc.wantField || !strings.Contains(fe.Message, tc.wantText) {
				t.Fatalf("got %v; want a FieldError on %s saying %q", err, tc.wantField, tc.wantText)
			}
		})
	}
}
