package hicachedeployment

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/controller/testsupport"
)

// RenderChildren is what the controller writes for a new deployment, in its order, each applied
// object stamped as the applier stamps it.
func TestRenderChildren(t *testing.T) {
	h := testsupport.LoadSample(t, "hicachedeployment_deepseek_v4.yaml")
	h.Namespace, h.UID = "default", "hcd-uid"
	cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: h.Spec.Storage.BackendRef.Name, Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "10.0.0.9:50051", AdminURL: "http://10.0.0.9:9003"}}}}
	objs, err := RenderChildren(h, cb, storeuse.Options{DefaultSGLangImage: "sglang:test"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, fmt.Sprintf("%T %s", o, o.GetName()))
		if o.GetAnnotations()[hicachev1alpha1.AnnotationAppliedHash] == "" && fmt.Sprintf("%T", o) != "*v1.Secret" {
			t.Errorf("%T %s has no applied hash", o, o.GetName())
		}
	}
	want := fmt.Sprint([]string{"*v1.Secret " + h.Name + "-sglang-admin", "*v1.Secret " + h.Name + "-sglang-server", "*v1.ConfigMap " + h.Name + "-hicache", "*v1.Service " + h.Name,
		"*v1.NetworkPolicy " + h.Name + "-sglang", "*v1.Service " + h.Name + "-0", "*v1.NetworkPolicy " + h.Name + "-0", "*v1.StatefulSet " + h.Name + "-0"})
	if fmt.Sprint(got) != want {
		t.Errorf("RenderChildren =\n%v\nwant\n%v", got, want)
	}
	// The StatefulSet is the one the controller builds, with the backend's endpoints from its spec
	// before it is probed.
	sts := objs[len(objs)-1]
	built, err := BuildGroup(h, testsupport.MustResolve(t, h), BackendOf(cb, storeuse.SpecEndpoints(cb), storeuse.DefaultEtcdImage), 0, PodImages{SGLang: "sglang:test", Guard: storeuse.DefaultGuardImage})
	if err != nil {
		t.Fatal(err)
	}
	if err := reconcile.StampAppliedHash(built); err != nil {
		t.Fatal(err)
	}
	if a, b := sts.GetAnnotations()[hicachev1alpha1.AnnotationAppliedHash], built.Annotations[hicachev1alpha1.AnnotationAppliedHash]; a != b {
		t.Errorf("rendered StatefulSet hash %s, built %s", a, b)
	}
	if _, err := RenderChildren(h, nil, storeuse.Options{}); err == nil {
		t.Error("RenderChildren of a deployment with storage and no backend succeeded")
	}
}

// A deployment with roles renders the groups of both roles, prefill first, each with its own
// headless Service and NetworkPolicy; the PD sample also renders its router, which the client
// Service points at.
func TestRenderChildrenOfRoles(t *testing.T) {
	h := testsupport.LoadSample(t, pdSample)
	cb := &hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: h.Spec.Storage.BackendRef.Name, Namespace: "default"},
		Spec: hicachev1alpha1.CacheBackendSpec{Type: hicachev1alpha1.BackendMooncake, Mooncake: &hicachev1alpha1.MooncakeSpec{
			External: &hicachev1alpha1.ExternalMooncake{RPCAddress: "10.0.0.9:50051", AdminURL: "http://10.0.0.9:9003"}}}}
	objs, err := RenderChildren(h, cb, storeuse.Options{DefaultSGLangImage: "sglang:test"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, fmt.Sprintf("%T %s", o, o.GetName()))
	}
	var want []string
	want = append(want, "*v1.Secret "+h.Name+"-sglang-admin", "*v1.Secret "+h.Name+"-sglang-server", "*v1.Secret "+h.Name+"-router-admin", "*v1.ConfigMap "+h.Name+"-hicache", "*v1.Service "+h.Name)
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "Deployment"} {
		want = append(want, "*v1."+kind+" "+h.Name+"-router")
	}
	want = append(want, "*v1.NetworkPolicy "+h.Name+"-sglang")
	for _, g := range []string{"prefill-0", "prefill-1", "decode-0"} {
		want = append(want, "*v1.Service "+h.Name+"-"+g, "*v1.NetworkPolicy "+h.Name+"-"+g, "*v1.StatefulSet "+h.Name+"-"+g)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RenderChildren =\n%v\nwant\n%v", got, want)
	}
	// The router is the sample's: prefill/decode mode, the default policy for both roles, the
	// resources it asks for.
	routers := 0
	for _, o := range objs {
		dep, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		routers++
		c := dep.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--pd-disaggregation") || slices.Contains(c.Args, "--decode-policy") || slices.Contains(c.Args, "--prefill-policy") {
			t.Errorf("router args %q: want prefill/decode mode and one policy for both roles", c.Args)
		}
		if !equality.Semantic.DeepEqual(c.Resources, h.Spec.Router.Resources) || c.Resources.Requests.Cpu().IsZero() {
			t.Errorf("router resources %+v, the sample asks for %+v", c.Resources, h.Spec.Router.Resources)
		}
	}
	if routers != 1 {
		t.Errorf("%d router Deployments rendered, want 1", routers)
	}
}
