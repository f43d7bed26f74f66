// Package controller wires one reconciler per kind of the hicache.io API (one package each:
// cachebackend, cacheflush, hicachedeployment) over the shared kit (reconcile, storeuse). Each
// kind reads as a short list of phases: pure builders decide what should exist, server-side
// apply makes it so, and status is computed purely from what was observed and written once per
// reconcile.
package controller

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hicache-io/hicache-operator/internal/controller/cachebackend"
	"github.com/hicache-io/hicache-operator/internal/controller/cacheflush"
	"github.com/hicache-io/hicache-operator/internal/controller/hicachedeployment"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// Setup registers every controller with the manager.
func Setup(mgr ctrl.Manager, opts storeuse.Options) error {
	opts = opts.WithDefaults()
	// Deployments that name no image are resolved as the release of the built-in default.
	if err := resolve.CheckDefaultSGLangImage(opts.DefaultSGLangImage); err != nil {
		return fmt.Errorf("--default-sglang-image: %w", err)
	}
	if err := storeuse.RegisterIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	backends := &cachebackend.CacheBackendReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("cachebackend-controller"), Options: opts, Admin: opts.Admin}
	if err := backends.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&cacheflush.CacheFlushReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("cacheflush-controller"), Options: opts, Admin: opts.Admin, Flusher: opts.Flusher}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&hicachedeployment.HiCacheDeploymentReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("hicachedeployment-controller"), Options: opts,
		ProbeBackend: backends.RequestProbe}).SetupWithManager(mgr)
}
