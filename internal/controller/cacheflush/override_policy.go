package cacheflush

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=list

// overridePolicy tells whether the admission policy that checks the override verb for
// spec.allowInUse is installed and bound with Deny: looked up when a flush over a scope in use
// asks, again after interval once found.
type overridePolicy struct {
	mu       sync.Mutex
	at       time.Time
	bound    bool
	why      string
	interval time.Duration
}

// get returns whether the policy is bound, and why not.
func (p *overridePolicy) get(ctx context.Context, c client.Reader, now time.Time) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	interval := p.interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	// A found policy stands for interval; a missing one is looked for at every ask, so that a
	// policy installed since counts at once.
	if p.bound && now.Sub(p.at) < interval {
		return p.bound, p.why
	}
	p.bound, p.why = lookupOverridePolicy(ctx, c)
	p.at = now
	return p.bound, p.why
}

// refresh looks the policy up now, whatever the cache holds, and returns what it found and
// whether that differs from what was known before.
func (p *overridePolicy) refresh(ctx context.Context, c client.Reader, now time.Time) (bound bool, why string, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was, wasWhy, known := p.bound, p.why, !p.at.IsZero()
	p.bound, p.why = lookupOverridePolicy(ctx, c)
	p.at = now
	return p.bound, p.why, !known || was != p.bound || wasWhy != p.why
}

// overridePolicyWatch looks for the admission policy of spec.allowInUse when the manager starts
// and every interval after, and logs what it finds whenever that changes: an operator whose
// overrides cannot be honoured says so at once, not only when a flush asks. A flush that asks
// meanwhile waits with a condition and an event saying why (CacheFlushReconciler.checkInUse).
type overridePolicyWatch struct {
	policy   *overridePolicy
	reader   client.Reader
	interval time.Duration
	log      logr.Logger
}

// Start runs until ctx ends.
func (w overridePolicyWatch) Start(ctx context.Context) error {
	interval := w.interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if bound, why, changed := w.policy.refresh(ctx, w.reader, time.Now()); changed && ctx.Err() == nil {
			if bound {
				w.log.Info("The admission policy that checks the override verb of spec.allowInUse is bound: overrides are honoured")
			} else {
				w.log.Error(nil, "spec.allowInUse is not honoured: flushes that set it wait while what they remove is in use; install config/admission (the chart installs it)", "why", why)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica reports what it sees.
func (overridePolicyWatch) NeedLeaderElection() bool { return false }

// lookupOverridePolicy finds a ValidatingAdmissionPolicy on CacheFlush creates that checks the
// verb override, and a binding of it that denies.
func lookupOverridePolicy(ctx context.Context, c client.Reader) (bool, string) {
	var policies admissionv1.ValidatingAdmissionPolicyList
	if err := c.List(ctx, &policies); err != nil {
		return false, fmt.Sprintf("listing ValidatingAdmissionPolicies: %v", err)
	}
	var names []string
	for _, p := range policies.Items {
		if overridePolicyChecks(&p) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return false, "no ValidatingAdmissionPolicy checks the verb override on CacheFlush creates"
	}
	var bindings admissionv1.ValidatingAdmissionPolicyBindingList
	if err := c.List(ctx, &bindings); err != nil {
		return false, fmt.Sprintf("listing ValidatingAdmissionPolicyBindings: %v", err)
	}
	for _, b := range bindings.Items {
		if slices.Contains(names, b.Spec.PolicyName) && slices.Contains(b.Spec.ValidationActions, admissionv1.Deny) &&
			!narrows(b.Spec.MatchResources) && b.Spec.ParamRef == nil {
			return true, ""
		}
	}
	return false, fmt.Sprintf("no ValidatingAdmissionPolicyBinding binds %s with validationActions Deny and no narrowing matchResources", strings.Join(names, ", "))
}

func overridePolicyChecks(p *admissionv1.ValidatingAdmissionPolicy) bool {
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail || p.Spec.MatchConstraints == nil {
		return false
	}
	covers := false
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		if slices.Contains(r.APIGroups, "hicache.io") && slices.Contains(r.Resources, "cacheflushes") &&
			(slices.Contains(r.Operations, admissionv1.Create) || slices.Contains(r.Operations, admissionv1.OperationAll)) {
			covers = true
		}
	}
	if !covers {
		return false
	}
	for _, v := range p.Spec.Validations {
		if strings.Contains(v.Expression, "check('override')") && strings.Contains(v.Expression, "allowInUse") {
			return true
		}
	}
	return false
}

// narrows tells whether a binding's matchResources leaves some CacheFlush creates out.
func narrows(m *admissionv1.MatchResources) bool {
	if m == nil {
		return false
	}
	selects := func(s *metav1.LabelSelector) bool {
		return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0)
	}
	return len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0 || selects(m.NamespaceSelector) || selects(m.ObjectSelector)
}
