package controllers

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// asStored is obj as the API server returns it: the fields it sets and defaults filled in.
func asStored(obj client.Object) client.Object {
	out := obj.DeepCopyObject().(client.Object)
	out.SetUID("stored-uid")
	out.SetResourceVersion("42")
	out.SetGeneration(3)
	out.SetCreationTimestamp(t0)
	out.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: FieldOwner, Operation: metav1.ManagedFieldsOperationApply}})
	l := out.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["added-by-someone-else"] = "x"
	out.SetLabels(l)
	switch o := out.(type) {
	case *corev1.Service:
		o.Spec.ClusterIP, o.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
		o.Spec.Type, o.Spec.SessionAffinity = corev1.ServiceTypeClusterIP, corev1.ServiceAffinityNone
		o.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		o.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyCluster)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

func TestDerivative(t *testing.T) {
	h := makeHCD("q").TP(4).Storage("mooncake").Obj()
	r := mustResolve(t, h)
	sts := mustBuildGroup(t, h, 0)
	svc := buildClientService(h)
	cm, err := buildConfigMap(h, r, mooncakeOf(h, r, testBackend()))
	if err != nil {
		t.Fatal(err)
	}
	cb := managedBackend("mc")
	dep := buildMasterDeployment(cb, "mooncake:test")

	cases := map[string]struct {
		desired  client.Object
		existing func() client.Object
		want     bool
	}{
		"a stored Service with server defaults": {desired: svc, existing: func() client.Object { return asStored(svc) }, want: true},
		"a stored StatefulSet":                  {desired: sts, existing: func() client.Object { return asStored(sts) }, want: true},
		"a stored ConfigMap":                    {desired: cm, existing: func() client.Object { return asStored(cm) }, want: true},
		"a stored Deployment with defaults": {desired: dep, existing: func() client.Object {
			s := dep.DeepCopy()
			s.Spec.RevisionHistoryLimit = ptrTo(int32(10))
			s.Spec.ProgressDeadlineSeconds = ptrTo(int32(600))
			s.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
			s.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
			s.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
			s.Spec.Template.Spec.Containers[0].LivenessProbe.SuccessThreshold = 1
			return asStored(s)
		}, want: true},
		"a label value changed": {desired: svc, existing: func() client.Object {
			s := asStored(svc)
			l := s.GetLabels()
			l[hicachev1alpha1.LabelDeployment] = "other"
			s.SetLabels(l)
			return s
		}},
		"a desired annotation missing": {desired: sts, existing: func() client.Object {
			s := asStored(sts)
			s.SetAnnotations(nil)
			return s
		}},
		"the template hash differs": {desired: sts, existing: func() client.Object {
			s := asStored(sts)
			a := s.GetAnnotations()
			a[hicachev1alpha1.AnnotationTemplateHash] = "0000000000000000"
			s.SetAnnotations(a)
			return s
		}},
		"another owner": {desired: svc, existing: func() client.Object {
			s := asStored(svc)
			s.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "y"}})
			return s
		}},
		"a spec value changed": {desired: svc, existing: func() client.Object {
			s := asStored(svc).(*corev1.Service)
			s.Spec.Ports[0].Port = 8080
			return s
		}},
		"a selector changed": {desired: svc, existing: func() client.Object {
			s := asStored(svc).(*corev1.Service)
			s.Spec.Selector[appsv1.PodIndexLabel] = "1"
			return s
		}},
		"a target port changed": {desired: svc, existing: func() client.Object {
			s := asStored(svc).(*corev1.Service)
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(1)
			return s
		}},
		"a data value changed": {desired: cm, existing: func() client.Object {
			c := asStored(cm).(*corev1.ConfigMap)
			c.Data["layout.txt"] = "namespace: hc-other"
			return c
		}},
		"a container image changed": {desired: dep, existing: func() client.Object {
			d := dep.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Image = "mooncake:old"
			return asStored(d)
		}},
		"a resource quantity changed": {desired: dep, existing: func() client.Object {
			d := dep.DeepCopy()
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
			return asStored(d)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := derivative(tc.desired, tc.existing()); got != tc.want {
				t.Errorf("derivative = %v, want %v", got, tc.want)
			}
		})
	}
}

// managedBackend is a managed CacheBackend with the API server's defaults.
func managedBackend(name string) *hicachev1alpha1.CacheBackend {
	return &hicachev1alpha1.CacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "cb-uid"},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			MetadataServer: "P2PHANDSHAKE",
			Managed: &hicachev1alpha1.ManagedMooncake{
				RPCPort: 50051, AdminPort: 9003, EvictionHighWatermarkRatio: "0.9", EvictionRatio: "0.05",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}},
			},
		}},
	}
}
