package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

func benchNamespace(b *testing.B) string {
	b.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

func startMasterB(b *testing.B) *mooncaketest.Master { b.Helper(); return mooncaketest.Start(b) }
