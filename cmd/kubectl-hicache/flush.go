package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

const (
	defaultFlushTimeout = 5 * time.Minute
	defaultFlushReason  = "Requested with kubectl hicache flush"
	// flushPollInterval is how often flush --wait reads the CacheFlush.
	flushPollInterval = 500 * time.Millisecond
)

// l3NamespaceRE is the pattern of an L3 namespace (CacheFlush spec.namespace).
var l3NamespaceRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

type flushOptions struct {
	cluster clusterFlags
	prefix  string
	tenant  string
	all     bool
	force   bool
	inUse   bool
	reason  string
	wait    bool
	timeout time.Duration
}

func newFlushCmd() *cobra.Command {
	o := flushOptions{}
	cmd := &cobra.Command{
		Use:   "flush BACKEND (--prefix NS | --all | --tenant T)",
		Short: "Remove objects from the L3 store of a CacheBackend and follow the flush",
		Long: `flush creates a CacheFlush for the CacheBackend BACKEND and, with --wait (the default), follows
it until the operator has run and verified it, printing a line whenever its state changes.

What is removed is exactly one of:

  --prefix NS   the objects of one L3 namespace: every key that starts with NS_ (the
                extra_backend_tag a HiCacheDeployment writes under, e.g. hc-4d9c4e519d)
  --all         every object of the store
  --tenant T    the objects of one tenant (the backend must set spec.mooncake.multiTenant)

The operator runs one flush per backend at a time, and a flush waits while anything uses what it
removes: a serving pod or a HiCacheDeployment, in any Kubernetes namespace, that writes the
namespace (or, for --all and --tenant, anything) on the same store, through this or any other
CacheBackend naming the same master. --allow-in-use flushes all the same; it needs the verb
"override" on cacheflushes (the ClusterRole hicache-operator-flush-override), which an admission
policy checks. -n/--namespace is the Kubernetes namespace of the CacheBackend and the CacheFlush,
not the L3 namespace.

The exit code is 0 once the flush completed, 1 if it failed for good or did not finish within
--timeout (it keeps running in the cluster).`,
		Example: `  kubectl hicache flush mooncake --prefix hc-4d9c4e519d
  kubectl hicache flush mooncake --all --reason "new model weights" -n serving
  kubectl hicache flush mooncake --tenant team-a --wait=false
  kubectl hicache flush mooncake --prefix hc-4d9c4e519d --allow-in-use --reason "corrupt objects"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("flush takes one CacheBackend name, got %d\nRun '%s --help' for usage", len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := o.spec(args[0], cmd.Flags().Changed("prefix"), cmd.Flags().Changed("tenant"))
			if err != nil {
				return err
			}
			s, err := o.cluster.connect(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), s, spec, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.cluster.addTo(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.prefix, "prefix", "", "L3 namespace to remove: every key that starts with NS_ (e.g. hc-4d9c4e519d)")
	fs.BoolVar(&o.all, "all", false, "remove every object of the store")
	fs.StringVar(&o.tenant, "tenant", "", "tenant whose objects to remove (multi-tenant masters only)")
	fs.BoolVar(&o.force, "force", true, "also remove objects read within the master's lease TTL")
	fs.BoolVar(&o.inUse, "allow-in-use", false, "flush even while deployments use what is removed (spec.allowInUse; needs the override verb on cacheflushes)")
	fs.StringVar(&o.reason, "reason", defaultFlushReason, "why, in words, recorded in the CacheFlush")
	fs.BoolVar(&o.wait, "wait", true, "follow the flush until it completes or fails")
	fs.DurationVar(&o.timeout, "timeout", defaultFlushTimeout, "how long --wait follows the flush")
	return cmd
}

// spec checks the flags and returns the CacheFlush they ask for. prefixSet and tenantSet say
// whether --prefix and --tenant were given (even empty).
func (o *flushOptions) spec(backend string, prefixSet, tenantSet bool) (hicachev1alpha1.CacheFlushSpec, error) {
	var chosen []string
	if prefixSet {
		chosen = append(chosen, "--prefix")
	}
	if o.all {
		chosen = append(chosen, "--all")
	}
	if tenantSet {
		chosen = append(chosen, "--tenant")
	}
	spec := hicachev1alpha1.CacheFlushSpec{
		BackendRef: hicachev1alpha1.LocalObjectReference{Name: backend},
		Force:      &o.force,
		AllowInUse: o.inUse,
		Reason:     o.reason,
	}
	switch {
	case len(chosen) == 0 && o.cluster.namespace != "":
		return spec, fmt.Errorf("say what to flush: --prefix NS (one L3 namespace), --all (the whole store) or --tenant T (one tenant); "+
			"-n/--namespace %s is the Kubernetes namespace of the CacheBackend, the L3 namespace goes to --prefix", o.cluster.namespace)
	case len(chosen) == 0:
		return spec, errors.New("say what to flush: --prefix NS (one L3 namespace), --all (the whole store) or --tenant T (one tenant)")
	case len(chosen) > 1:
		return spec, fmt.Errorf("%s cannot be combined: give exactly one of --prefix, --all and --tenant", strings.Join(chosen, " and "))
	}
	switch {
	case prefixSet:
		if err := checkL3Namespace(o.prefix); err != nil {
			return spec, err
		}
		spec.Scope, spec.Namespace = hicachev1alpha1.FlushScopeNamespace, o.prefix
	case tenantSet:
		if o.tenant == "" || len(o.tenant) > 128 {
			return spec, fmt.Errorf("--tenant %q: a tenant is 1 to 128 characters", o.tenant)
		}
		spec.Scope, spec.Tenant = hicachev1alpha1.FlushScopeTenant, o.tenant
	default:
		spec.Scope = hicachev1alpha1.FlushScopeAll
	}
	if len(o.reason) > 1024 {
		return spec, fmt.Errorf("--reason is %d characters long; keep it within 1024", len(o.reason))
	}
	if o.wait && o.timeout <= 0 {
		return spec, fmt.Errorf("--timeout %s: give a positive duration such as 5m, or --wait=false", o.timeout)
	}
	return spec, nil
}

// checkL3Namespace checks an L3 namespace as the CacheFlush CRD does, with advice.
func checkL3Namespace(ns string) error {
	switch {
	case ns == "":
		return errors.New("--prefix needs an L3 namespace, e.g. --prefix hc-4d9c4e519d (kubectl hicache status NAME shows a deployment's)")
	case strings.HasSuffix(ns, "_") && l3NamespaceRE.MatchString(strings.TrimSuffix(ns, "_")):
		return fmt.Errorf("--prefix %s: give the namespace without the trailing _ (--prefix %s removes the keys that start with %s)",
			ns, strings.TrimSuffix(ns, "_"), ns)
	case len(ns) > 63 || !l3NamespaceRE.MatchString(ns):
		return fmt.Errorf("--prefix %q is not an L3 namespace: lower-case letters, digits and '-', 1 to 63 characters, starting and ending with a letter or digit", ns)
	}
	return nil
}

// describeFlush says what a flush removes, in words.
func describeFlush(spec *hicachev1alpha1.CacheFlushSpec) string {
	var what string
	switch spec.Scope {
	case hicachev1alpha1.FlushScopeNamespace:
		what = fmt.Sprintf("removes namespace %s (keys %s_*)", spec.Namespace, spec.Namespace)
	case hicachev1alpha1.FlushScopeTenant:
		what = fmt.Sprintf("removes the objects of tenant %s", spec.Tenant)
	default:
		what = "removes every object"
	}
	what += " of CacheBackend " + spec.BackendRef.Name
	if spec.Force != nil && !*spec.Force {
		what += ", sparing objects under a read lease"
	}
	if spec.AllowInUse {
		what += ", even while deployments use it"
	}
	return what
}

// run checks the backend, creates the CacheFlush and, with --wait, follows it.
func (o *flushOptions) run(ctx context.Context, s *session, spec hicachev1alpha1.CacheFlushSpec, out, errOut io.Writer) error {
	var cb hicachev1alpha1.CacheBackend
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: spec.BackendRef.Name}, &cb); err != nil {
		if apierrors.IsNotFound(err) {
			return missingBackend(ctx, s, spec.BackendRef.Name)
		}
		return apiError(err, fmt.Sprintf("reading CacheBackend %q", spec.BackendRef.Name))
	}
	if spec.Scope == hicachev1alpha1.FlushScopeTenant && (cb.Spec.Mooncake == nil || !cb.Spec.Mooncake.MultiTenant) {
		return fmt.Errorf("CacheBackend %q is not multi-tenant (spec.mooncake.multiTenant is false): its master ignores tenants and would remove every object; use --all to empty the store, or --prefix for one namespace",
			cb.Name)
	}
	for _, w := range flushWarnings(&spec, &cb) {
		fmt.Fprintf(errOut, "warning: %s\n", w)
	}

	cf := &hicachev1alpha1.CacheFlush{
		ObjectMeta: metav1.ObjectMeta{GenerateName: spec.BackendRef.Name + "-manual-", Namespace: s.namespace},
		Spec:       spec,
	}
	if err := s.client.Create(ctx, cf); err != nil {
		if spec.AllowInUse && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "allowInUse") {
			return fmt.Errorf("--allow-in-use was refused: %w; without --allow-in-use the flush waits until nothing uses what it removes", err)
		}
		return apiError(err, "creating the CacheFlush")
	}
	fmt.Fprintf(out, "cacheflush/%s created: %s\n", cf.Name, describeFlush(&cf.Spec))
	if !o.wait {
		fmt.Fprintf(out, "Follow it with: kubectl get cacheflush %s -n %s -w\n", cf.Name, cf.Namespace)
		return nil
	}
	return waitFlush(ctx, s.client, client.ObjectKeyFromObject(cf), out, o.timeout, flushPollInterval)
}

// missingBackend is the error for a CacheBackend that does not exist, naming those that do.
func missingBackend(ctx context.Context, s *session, name string) error {
	var list hicachev1alpha1.CacheBackendList
	if err := s.client.List(ctx, &list, client.InNamespace(s.namespace)); err != nil {
		return apiError(err, fmt.Sprintf("CacheBackend %q not found in namespace %s; listing the others", name, s.namespace))
	}
	names := make([]string, len(list.Items))
	for i := range list.Items {
		names[i] = list.Items[i].Name
	}
	return fmt.Errorf("CacheBackend %q not found in namespace %s (%s): check the name, or pick the namespace with -n",
		name, s.namespace, nameList(names))
}

// flushWarnings are things a person should know before a flush runs, from what the backend
// reports about the namespaces in use.
func flushWarnings(spec *hicachev1alpha1.CacheFlushSpec, cb *hicachev1alpha1.CacheBackend) []string {
	var out []string
	for _, u := range cb.Status.Namespaces {
		if len(u.Deployments) == 0 {
			continue
		}
		users := "HiCacheDeployment " + strings.Join(u.Deployments, ", ")
		waits := "the flush waits until nothing uses it (--allow-in-use flushes it all the same)"
		if spec.AllowInUse {
			waits = "--allow-in-use flushes it all the same: its cache starts cold"
		}
		switch spec.Scope {
		case hicachev1alpha1.FlushScopeNamespace:
			if u.Namespace == spec.Namespace {
				out = append(out, fmt.Sprintf("namespace %s is in use by %s: %s", u.Namespace, users, waits))
			}
		case hicachev1alpha1.FlushScopeAll, hicachev1alpha1.FlushScopeTenant:
			out = append(out, fmt.Sprintf("this flush also removes namespace %s, in use by %s: %s", u.Namespace, users, waits))
		}
	}
	return out
}

// attemptNumberRE finds attempt numbers in a progress line.
var attemptNumberRE = regexp.MustCompile(`attempt \d+`)

// waitFlush reads the CacheFlush every interval, printing a line whenever its state changes,
// until it completes (nil), fails for good, or timeout passes. A failure that repeats at later
// attempts is printed once.
func waitFlush(ctx context.Context, c client.Client, key client.ObjectKey, out io.Writer, timeout, interval time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last, shown := "", "" // the latest line, and the state last printed
	seen := false         // whether the operator ever wrote a status
	for {
		var cf hicachev1alpha1.CacheFlush
		err := c.Get(waitCtx, key, &cf)
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("CacheFlush %s was deleted before it finished", key.Name)
		case err != nil && waitCtx.Err() == nil:
			return apiError(err, "reading CacheFlush "+key.Name)
		case err == nil:
			line, state := flushProgress(&cf)
			// The same failure again, at a later attempt, is not news.
			if key := attemptNumberRE.ReplaceAllString(line, "attempt #"); key != shown {
				fmt.Fprintf(out, "%s: %s\n", cf.Name, line)
				shown = key
			}
			last = line
			seen = seen || len(cf.Status.Conditions) > 0
			switch state {
			case flushDone:
				return nil
			case flushFailed:
				return fmt.Errorf("CacheFlush %s failed: %s", cf.Name, failedMessage(&cf))
			}
		}
		select {
		case <-waitCtx.Done():
			return stoppedWaiting(ctx, key, timeout, last, seen)
		case <-time.After(interval):
		}
	}
}

// stoppedWaiting is the error when flush stops following a CacheFlush that has not finished.
func stoppedWaiting(ctx context.Context, key client.ObjectKey, timeout time.Duration, last string, seen bool) error {
	msg := fmt.Sprintf("CacheFlush %s did not finish within %s", key.Name, timeout)
	if ctx.Err() != nil {
		msg = fmt.Sprintf("stopped following CacheFlush %s", key.Name)
	}
	if last != "" {
		msg += " (last: " + last + ")"
	}
	if !seen {
		msg += "; the operator never picked it up: is hicache-operator running?"
	}
	return fmt.Errorf("%s; it goes on in the cluster: kubectl get cacheflush %s -n %s -w", msg, key.Name, key.Namespace)
}

// flushState is where a CacheFlush stands for flush --wait.
type flushState int

const (
	flushPending flushState = iota
	flushDone
	flushFailed
)

// retriedPrefixRE is how the operator starts the message of a failed attempt, which the
// progress line says in its own words.
var retriedPrefixRE = regexp.MustCompile(`^Attempt \d+ failed( and is retried)?: `)

// flushProgress says in one line where a CacheFlush stands, from its status alone.
func flushProgress(cf *hicachev1alpha1.CacheFlush) (string, flushState) {
	st := &cf.Status
	complete := meta.FindStatusCondition(st.Conditions, hicachev1alpha1.ConditionComplete)
	failed := meta.FindStatusCondition(st.Conditions, hicachev1alpha1.ConditionFailed)
	switch {
	case complete != nil && complete.Status == metav1.ConditionTrue:
		return fmt.Sprintf("complete: removed %d objects, %d left", st.Removed, st.KeysLeft), flushDone
	case failed != nil && failed.Status == metav1.ConditionTrue && (failed.Reason == hicachev1alpha1.ReasonKeysLeft ||
		failed.Reason == hicachev1alpha1.ReasonAttemptsExhausted || failed.Reason == hicachev1alpha1.ReasonInvalidScope):
		return "failed: " + lowerFirst(failed.Message), flushFailed
	case failed != nil && failed.Status == metav1.ConditionTrue:
		// The failed attempt is the last one started: the next has not started while Failed
		// is True.
		n := strconv.Itoa(int(st.Attempts))
		switch failed.Reason {
		case hicachev1alpha1.ReasonKeysLeftRetrying:
			return fmt.Sprintf("attempt %s left %d objects, retrying", n, st.KeysLeft), flushPending
		case hicachev1alpha1.ReasonBackendUnreachable, hicachev1alpha1.ReasonJobFailed, hicachev1alpha1.ReasonAttemptTimedOut:
			return fmt.Sprintf("attempt %s failed: %s, retrying", n, retriedPrefixRE.ReplaceAllString(failed.Message, "")), flushPending
		}
		return fmt.Sprintf("attempt %s failed (%s): %s, retrying", n, failed.Reason, failed.Message), flushPending
	case complete == nil:
		return "waiting for the operator to take it up", flushPending
	}
	msg := complete.Message
	switch complete.Reason {
	case hicachev1alpha1.ReasonRunning:
		return fmt.Sprintf("running attempt %d", st.Attempts), flushPending
	case hicachev1alpha1.ReasonWaitingForTurn:
		if strings.HasPrefix(msg, "Waiting for ") {
			return lowerFirst(msg), flushPending
		}
		return "waiting for its turn: " + msg, flushPending
	case hicachev1alpha1.ReasonWaitingForBackend:
		return "waiting for the backend: " + msg, flushPending
	case hicachev1alpha1.ReasonInUse:
		return "waiting: " + lowerFirst(strings.Replace(msg, "spec.allowInUse overrides this", "--allow-in-use overrides this", 1)), flushPending
	}
	return lowerFirst(complete.Reason) + ": " + msg, flushPending
}

// failedMessage is the message of a CacheFlush's Failed condition.
func failedMessage(cf *hicachev1alpha1.CacheFlush) string {
	if c := meta.FindStatusCondition(cf.Status.Conditions, hicachev1alpha1.ConditionFailed); c != nil {
		return c.Message
	}
	return "no message"
}

// lowerFirst lowers the first letter of a sentence, unless it starts a word written in capitals
// (a kind such as CacheBackend).
func lowerFirst(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 || !unicode.IsUpper(r) {
		return s
	}
	if next, _ := utf8.DecodeRuneInString(s[size:]); !unicode.IsLower(next) {
		return s
	}
	for i, c := range s {
		if c == ' ' {
			break
		}
		if i > 0 && unicode.IsUpper(c) {
			return s // CacheBackend, HiCacheDeployment
		}
	}
	return string(unicode.ToLower(r)) + s[size:]
}
