package controllers

import (
	"context"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// HiCacheDeploymentReconciler runs SGLang serving groups with HiCache and keeps their L3 layout correct.
type HiCacheDeploymentReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Options  Options
}

// +kubebuilder:rbac:groups=hicache.io,resources=hicachedeployments,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=hicache.io,resources=hicachedeployments/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one HiCacheDeployment to its desired state.
func (r *HiCacheDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var hcd hicachev1alpha1.HiCacheDeployment
	if err := r.Get(ctx, req.NamespacedName, &hcd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller.
func (r *HiCacheDeploymentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&hicachev1alpha1.HiCacheDeployment{}).Named("hicachedeployment").Complete(r)
}
