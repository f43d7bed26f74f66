package resolve

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/router"
)

// LeaderSelector selects the leaders (pod 0) of a deployment's serving groups, of one role when
// role is set: the pods the router discovers as its servers.
func LeaderSelector(hcd *hicachev1alpha1.HiCacheDeployment, role hicachev1alpha1.Role) map[string]string {
	sel := map[string]string{hicachev1alpha1.LabelDeployment: hcd.Name, appsv1.PodIndexLabel: "0"}
	if role != "" {
		sel[hicachev1alpha1.LabelRole] = string(role)
	}
	return sel
}

// RouterConfig is what the router of a deployment with spec.router is told. Without spec.roles
// it discovers the leaders of the serving groups in the deployment's namespace and routes by
// spec.router.policy. With spec.roles it runs in prefill/decode mode: the prefill and the decode
// leaders are discovered apart, by their role label, and each request goes to one of each, chosen
// by spec.router.prefillPolicy and decodePolicy (spec.router.policy when unset). With
// spec.security.apiKeySecretRef the router requires SGLang's API key of its clients and presents
// it to the leaders, whose guard passes it to SGLang; its management routes take only the key
// of the Secret the operator generates for it (RouterAdminKeySecret). Both reach it as
// references the kubelet expands from secretKeyRef variables. The operator
// runs it (hicachedeployment.BuildRouter) and kubectl hicache plan shows it from this one function.
func RouterConfig(hcd *hicachev1alpha1.HiCacheDeployment) (router.Config, error) {
	spec := hcd.Spec.Router
	if spec == nil {
		return router.Config{}, fmt.Errorf("spec.router is not set")
	}
	cfg := router.Config{
		Namespace:  hcd.Namespace,
		WorkerPort: SGLangPort,
		Policy:     string(spec.Policy),
		// The kubelet expands these from secretKeyRef variables (hicachedeployment.BuildRouter).
		ControlPlaneKey: "$(" + RouterAdminKeyEnv + ")",
	}
	if APIKeySecret(hcd) != nil {
		cfg.APIKey = "$(" + APIKeyEnv + ")"
	}
	if hcd.Spec.Roles == nil {
		for _, p := range []struct{ field, value string }{{"prefillPolicy", string(spec.PrefillPolicy)}, {"decodePolicy", string(spec.DecodePolicy)}} {
			if p.value != "" {
				return router.Config{}, fmt.Errorf("spec.router.%s chooses the servers of one role and applies only with spec.roles: set spec.router.policy instead", p.field)
			}
		}
		cfg.Selector = LeaderSelector(hcd, "")
		return cfg, nil
	}
	cfg.PrefillSelector = LeaderSelector(hcd, hicachev1alpha1.RolePrefill)
	cfg.DecodeSelector = LeaderSelector(hcd, hicachev1alpha1.RoleDecode)
	cfg.PrefillPolicy, cfg.DecodePolicy = string(spec.PrefillPolicy), string(spec.DecodePolicy)
	return cfg, nil
}
