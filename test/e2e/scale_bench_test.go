package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/localcluster"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// BenchmarkConverge measures how long the operator takes to bring many deployments to Ready on
// the local control plane: 50 DeepSeek-V4 deployments of one two-node TP=16 group each (100
// rank pods, 800 simulated GPUs), all writing to one real Mooncake master. Run it with
//
//	go test -run '^$' -bench Converge -benchtime 1x ./test/e2e/
func BenchmarkConverge(b *testing.B) {
	const deployments = 50
	ctx := context.Background()
	// Nodes for the rank pods, beside the suite's own.
	for i := range 2 * deployments {
		n := localcluster.NodeSpec{Name: fmt.Sprintf("bench-node-%d", i), GPUs: 8}.Node(100 + i)
		if err := k8s.Create(ctx, n); client.IgnoreAlreadyExists(err) != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := benchNamespace(b)
		m := startMasterB(b)
		if err := k8s.Create(ctx, testutil.ExternalBackend(ns, "mooncake", m.RPCAddr, m.AdminURL)); err != nil {
			b.Fatal(err)
		}
		writes := operatorWrites.Load()
		b.StartTimer()
		start := time.Now()
		for d := range deployments {
			if err := k8s.Create(ctx, testutil.DeepSeekV4(ns, fmt.Sprintf("dsv4-%d", d))); err != nil {
				b.Fatal(err)
			}
		}
		for {
			var list hicachev1alpha1.HiCacheDeploymentList
			if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			ready := 0
			for j := range list.Items {
				if list.Items[j].Status.ReadyReplicas == 1 && list.Items[j].Status.ObservedGeneration == list.Items[j].Generation {
					ready++
				}
			}
			if ready == deployments {
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("%d of %d deployments ready after 5 minutes", ready, deployments)
			}
			time.Sleep(100 * time.Millisecond)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(elapsed.Seconds(), "s-to-all-ready")
		b.ReportMetric(float64(2*deployments)/elapsed.Seconds(), "rank-pods-ready/s")
		b.ReportMetric(float64(operatorWrites.Load()-writes)/deployments, "operator-writes/deployment")
		b.StartTimer()
	}
}
