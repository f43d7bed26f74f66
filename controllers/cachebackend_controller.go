package controllers

import (
	"context"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// CacheBackendReconciler runs managed Mooncake masters and probes every backend's health and
// capacity.
type CacheBackendReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Options  Options
}

// +kubebuilder:rbac:groups=hicache.io,resources=cachebackends,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=hicache.io,resources=cachebackends/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one CacheBackend to its desired state.
func (r *CacheBackendReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cb hicachev1alpha1.CacheBackend
	if err := r.Get(ctx, req.NamespacedName, &cb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller.
func (r *CacheBackendReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&hicachev1alpha1.CacheBackend{}).Named("cachebackend").Complete(r)
}
