package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/kubeutil"
	"github.com/hicache-io/hicache-operator/internal/resolve"
)

func newStatusCmd() *cobra.Command {
	var (
		cf     clusterFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a running HiCacheDeployment: groups, pods, rank duties, layout and L3 store",
		Long: `status reads a HiCacheDeployment from the cluster and shows, in one place:

  - its conditions (Ready, Progressing, CacheLayoutCurrent, BackendReady);
  - its serving groups, ready of desired, and per group its pods: node, readiness, node rank
    (apps.kubernetes.io/pod-index), the ranks the pod runs and how many of them write to L3;
  - the per-rank duty table, from the plan the operator stored in the ConfigMap NAME-hicache
    (recomputed from the spec when the ConfigMap has none);
  - the L3 layout: namespace, layout hash, the namespaces older layouts left behind with their
    CacheFlush or what blocks it, and the last flush;
  - the health of its CacheBackend: Ready, object count and memory used.

-o json and -o yaml print it all as one document.`,
		Example: `  kubectl hicache status deepseek-v4
  kubectl hicache status deepseek-v4 -n serving -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("status takes one HiCacheDeployment name, got %d\nRun '%s --help' for usage", len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			s, err := cf.connect(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			obs, err := observeDeployment(cmd.Context(), s, args[0])
			if err != nil {
				return err
			}
			rep := newStatusReport(obs)
			if output != outputTable {
				return writeStructured(cmd.OutOrStdout(), output, rep)
			}
			return writeStatus(cmd.OutOrStdout(), &rep)
		},
	}
	cf.addTo(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", outputTable, "output format: "+strings.Join(outputFormats, ", "))
	return cmd
}

// observation is what status read from the cluster about one HiCacheDeployment.
type observation struct {
	hcd  *hicachev1alpha1.HiCacheDeployment
	sets []appsv1.StatefulSet
	pods []corev1.Pod
	// configMap is the operator's ConfigMap of the deployment; nil when it does not exist.
	configMap *corev1.ConfigMap
	// backend is the CacheBackend of spec.storage; nil when there is none or it is missing.
	backend *hicachev1alpha1.CacheBackend
}

// observeDeployment reads a HiCacheDeployment and what belongs to it.
func observeDeployment(ctx context.Context, s *session, name string) (*observation, error) {
	obs := &observation{hcd: &hicachev1alpha1.HiCacheDeployment{}}
	key := client.ObjectKey{Namespace: s.namespace, Name: name}
	if err := s.client.Get(ctx, key, obs.hcd); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, missingDeployment(ctx, s, name)
		}
		return nil, apiError(err, fmt.Sprintf("reading HiCacheDeployment %q", name))
	}
	owned := client.MatchingLabels{hicachev1alpha1.LabelDeployment: name}
	var sets appsv1.StatefulSetList
	if err := s.client.List(ctx, &sets, client.InNamespace(s.namespace), owned); err != nil {
		return nil, apiError(err, "listing the StatefulSets of "+name)
	}
	for _, st := range sets.Items {
		if metav1.IsControlledBy(&st, obs.hcd) {
			obs.sets = append(obs.sets, st)
		}
	}
	var pods corev1.PodList
	if err := s.client.List(ctx, &pods, client.InNamespace(s.namespace), owned); err != nil {
		return nil, apiError(err, "listing the pods of "+name)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			obs.pods = append(obs.pods, p)
		}
	}
	var cm corev1.ConfigMap
	switch err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: resolve.ConfigMapName(name)}, &cm); {
	case err == nil:
		obs.configMap = &cm
	case !apierrors.IsNotFound(err):
		return nil, apiError(err, "reading ConfigMap "+resolve.ConfigMapName(name))
	}
	if st := obs.hcd.Spec.Storage; st != nil {
		var cb hicachev1alpha1.CacheBackend
		switch err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: st.BackendRef.Name}, &cb); {
		case err == nil:
			obs.backend = &cb
		case !apierrors.IsNotFound(err):
			return nil, apiError(err, "reading CacheBackend "+st.BackendRef.Name)
		}
	}
	return obs, nil
}

// missingDeployment is the error for a HiCacheDeployment that does not exist, naming those that do.
func missingDeployment(ctx context.Context, s *session, name string) error {
	var list hicachev1alpha1.HiCacheDeploymentList
	if err := s.client.List(ctx, &list, client.InNamespace(s.namespace)); err != nil {
		return apiError(err, fmt.Sprintf("HiCacheDeployment %q not found in namespace %s; listing the others", name, s.namespace))
	}
	names := make([]string, len(list.Items))
	for i := range list.Items {
		names[i] = list.Items[i].Name
	}
	return fmt.Errorf("HiCacheDeployment %q not found in namespace %s (%s): check the name, or pick the namespace with -n",
		name, s.namespace, nameList(names))
}

// statusReport is the structured output of status. Conditions, cache and plan are the
// deployment's status as the operator wrote it; the rest is read from its pods, ConfigMap and
// CacheBackend.
type statusReport struct {
	Name               string `json:"name"`
	Namespace          string `json:"namespace"`
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observedGeneration"`
	// Ready is ready of desired serving groups, e.g. "1/1".
	Ready         string                        `json:"ready"`
	DesiredGroups int32                         `json:"desiredGroups"`
	ReadyGroups   int32                         `json:"readyGroups"`
	Attention     hicachev1alpha1.AttentionKind `json:"attention,omitempty"`
	Draft         string                        `json:"draft,omitempty"`
	Conditions    []metav1.Condition            `json:"conditions"`
	Groups        []groupReport                 `json:"groups"`
	// Plan is the summary of the rank plan from the status; Duties the full per-rank table.
	Plan   *hicachev1alpha1.PlanStatus `json:"plan,omitempty"`
	Duties dutiesReport                `json:"duties"`
	// Roles are the duties of each role of a deployment with spec.roles (Duties is then the
	// prefill's), and its groups per role as the status counts them.
	Roles       []roleDutiesReport           `json:"roles,omitempty"`
	RolesStatus *hicachev1alpha1.RolesStatus `json:"rolesStatus,omitempty"`
	Storage     *storageInfo                 `json:"storage,omitempty"`
	Cache       *hicachev1alpha1.CacheStatus `json:"cache,omitempty"`
	Backend     *backendReport               `json:"backend,omitempty"`
}

// groupReport is one serving group and its pods.
type groupReport struct {
	// Role is prefill or decode for a deployment with spec.roles.
	Role  string `json:"role,omitempty"`
	Index int    `json:"index"`
	// Desired is false for a group above spec.replicas, on its way out.
	Desired bool `json:"desired"`
	Ready   bool `json:"ready"`
	// Pods is how many pods the group should have; ReadyPods how many are ready.
	Pods        int         `json:"pods"`
	ReadyPods   int         `json:"readyPods"`
	StatefulSet string      `json:"statefulSet,omitempty"`
	Members     []podReport `json:"members"`
}

// podReport is one rank pod.
type podReport struct {
	Name     string `json:"name"`
	Node     string `json:"node"`
	Phase    string `json:"phase"`
	Ready    bool   `json:"ready"`
	NodeRank int    `json:"nodeRank"`
	// FirstRank and LastRank are the ranks of the group the pod runs; Writers how many of
	// them write to L3.
	FirstRank int `json:"firstRank"`
	LastRank  int `json:"lastRank"`
	Writers   int `json:"writers"`
}

// roleDutiesReport is the per-rank plan of one role's groups.
type roleDutiesReport struct {
	Role   string       `json:"role"`
	Duties dutiesReport `json:"duties"`
}

// dutiesReport is the per-rank plan and where it comes from.
type dutiesReport struct {
	// Source is "ConfigMap NAME" or "recomputed from the spec".
	Source string          `json:"source"`
	Note   string          `json:"note,omitempty"`
	Plan   *cache.RankPlan `json:"plan,omitempty"`
}

// backendReport is the health of the deployment's CacheBackend.
type backendReport struct {
	Name          string                            `json:"name"`
	Found         bool                              `json:"found"`
	Ready         *metav1.Condition                 `json:"ready,omitempty"`
	KeyCount      int64                             `json:"keyCount"`
	UsedBytes     int64                             `json:"usedBytes"`
	CapacityBytes int64                             `json:"capacityBytes"`
	Usage         string                            `json:"usage,omitempty"`
	Version       string                            `json:"version,omitempty"`
	Endpoints     *hicachev1alpha1.BackendEndpoints `json:"endpoints,omitempty"`
	LastProbeTime *metav1.Time                      `json:"lastProbeTime,omitempty"`
}

// newStatusReport assembles the report from what was observed. It is pure.
func newStatusReport(obs *observation) statusReport {
	h := obs.hcd
	st := &h.Status
	rep := statusReport{
		Name: h.Name, Namespace: h.Namespace,
		Generation: h.Generation, ObservedGeneration: st.ObservedGeneration,
		Attention: st.Attention, Draft: st.Draft,
		Conditions: st.Conditions, Plan: st.Plan, Cache: st.Cache,
		DesiredGroups: ptr.Deref(h.Spec.Replicas, hicachev1alpha1.DefaultReplicas),
	}
	if rep.Conditions == nil {
		rep.Conditions = []metav1.Condition{}
	}
	if h.Spec.Roles != nil {
		rolesReport(obs, &rep)
		return rep
	}
	if s := h.Spec.Storage; s != nil {
		var res *resolve.Resolved
		if r, err := resolve.Resolve(h); err == nil {
			res = r
		}
		rep.Storage = newStorageInfo(s, res)
		rep.Backend = newBackendReport(s.BackendRef.Name, obs.backend)
	}
	rep.Duties = duties(h, obs.configMap, "plan.json", func() (*resolve.Resolved, error) { return resolve.Resolve(h) })
	nodes := 0
	switch {
	case st.Plan != nil && st.Plan.Nodes > 0:
		nodes = int(st.Plan.Nodes)
	default:
		if r, err := resolve.Resolve(h); err == nil {
			nodes = r.Nodes
		}
	}
	rep.Groups = groups(obs, "", rep.DesiredGroups, nodes, rep.Duties.Plan)
	countReady(&rep)
	return rep
}

// countReady counts the report's ready desired groups.
func countReady(rep *statusReport) {
	for _, g := range rep.Groups {
		if g.Desired && g.Ready {
			rep.ReadyGroups++
		}
	}
	rep.Ready = fmt.Sprintf("%d/%d", rep.ReadyGroups, rep.DesiredGroups)
}

// rolesReport fills the report of a deployment with spec.roles: each role's groups and duties,
// its plan from the ConfigMap (plan.json is the prefill's, decode-plan.json the decode's).
func rolesReport(obs *observation, rep *statusReport) {
	h := obs.hcd
	rep.RolesStatus = h.Status.Roles
	roles, rolesErr := resolve.RolesOf(h)
	if s := h.Spec.Storage; s != nil {
		var res *resolve.Resolved
		if rolesErr == nil {
			res = roles.Prefill.Resolved
		}
		rep.Storage = newStorageInfo(s, res)
		rep.Backend = newBackendReport(s.BackendRef.Name, obs.backend)
	}
	rep.DesiredGroups = 0
	for _, role := range []hicachev1alpha1.Role{hicachev1alpha1.RolePrefill, hicachev1alpha1.RoleDecode} {
		key := "plan.json"
		if role == hicachev1alpha1.RoleDecode {
			key = string(role) + "-plan.json"
		}
		var rr *resolve.RoleResolved
		if rolesErr == nil {
			rr = roles.Prefill
			if role == hicachev1alpha1.RoleDecode {
				rr = roles.Decode
			}
		}
		d := duties(h, obs.configMap, key, func() (*resolve.Resolved, error) {
			if rolesErr != nil {
				return nil, rolesErr
			}
			return rr.Resolved, nil
		})
		rep.Roles = append(rep.Roles, roleDutiesReport{Role: string(role), Duties: d})
		if role == hicachev1alpha1.RolePrefill {
			rep.Duties = d
		}
		desired := roleReplicas(h, role)
		nodes := 0
		if rr != nil {
			nodes = rr.Nodes
		}
		rep.DesiredGroups += desired
		rep.Groups = append(rep.Groups, groups(obs, role, desired, nodes, d.Plan)...)
	}
	countReady(rep)
}

// roleReplicas is the number of groups the spec asks of a role.
func roleReplicas(h *hicachev1alpha1.HiCacheDeployment, role hicachev1alpha1.Role) int32 {
	r := h.Spec.Roles.Prefill.Replicas
	if role == hicachev1alpha1.RoleDecode {
		r = h.Spec.Roles.Decode.Replicas
	}
	return ptr.Deref(r, hicachev1alpha1.DefaultReplicas)
}

// duties is the rank plan the operator stored in the ConfigMap, or the plan recomputed from the
// spec when the ConfigMap holds none.
func duties(h *hicachev1alpha1.HiCacheDeployment, cm *corev1.ConfigMap, key string, resolved func() (*resolve.Resolved, error)) dutiesReport {
	name := resolve.ConfigMapName(h.Name)
	var note string
	switch {
	case cm == nil:
		note = fmt.Sprintf("ConfigMap %s does not exist (yet)", name)
	case cm.Data[key] == "":
		note = fmt.Sprintf("ConfigMap %s holds no %s", name, key)
	default:
		var p cache.RankPlan
		err := json.Unmarshal([]byte(cm.Data[key]), &p)
		if err == nil {
			return dutiesReport{Source: "ConfigMap " + name, Plan: &p}
		}
		note = fmt.Sprintf("%s of ConfigMap %s is not a rank plan: %v", key, name, err)
	}
	r, err := resolved()
	if err != nil {
		return dutiesReport{Source: "none", Note: fmt.Sprintf("%s, and the spec does not resolve: %v", note, err)}
	}
	return dutiesReport{Source: "recomputed from the spec", Note: note, Plan: &r.Plan}
}

// groups lists the desired serving groups of one role ("" without roles), and any others of it
// that still exist, with their pods.
func groups(obs *observation, role hicachev1alpha1.Role, desired int32, nodes int, plan *cache.RankPlan) []groupReport {
	byGroup := map[int]*groupReport{}
	get := func(g int) *groupReport {
		if byGroup[g] == nil {
			byGroup[g] = &groupReport{Role: string(role), Index: g, Desired: g < int(desired), Pods: nodes, Members: []podReport{}}
		}
		return byGroup[g]
	}
	for g := range int(desired) {
		get(g)
	}
	ofRole := func(l map[string]string) bool { return l[hicachev1alpha1.LabelRole] == string(role) }
	for i := range obs.sets {
		if !ofRole(obs.sets[i].Labels) {
			continue
		}
		if g, err := strconv.Atoi(obs.sets[i].Labels[hicachev1alpha1.LabelGroup]); err == nil {
			get(g).StatefulSet = obs.sets[i].Name
		}
	}
	perPod := 0
	var ranks []cache.RankDuty
	if plan != nil && nodes > 0 && plan.NumRanks()%nodes == 0 {
		perPod = plan.NumRanks() / nodes
		ranks = plan.Ranks()
	}
	for i := range obs.pods {
		p := &obs.pods[i]
		g, err := strconv.Atoi(p.Labels[hicachev1alpha1.LabelGroup])
		if err != nil || !ofRole(p.Labels) {
			continue
		}
		rank, err := strconv.Atoi(p.Labels[appsv1.PodIndexLabel])
		if err != nil {
			rank = -1
		}
		pr := podReport{Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Ready: kubeutil.PodReady(p), NodeRank: rank,
			FirstRank: -1, LastRank: -1}
		if perPod > 0 && rank >= 0 {
			pr.FirstRank, pr.LastRank = rank*perPod, (rank+1)*perPod-1
			for _, d := range ranks {
				if d.GlobalRank >= pr.FirstRank && d.GlobalRank <= pr.LastRank && d.HasDuties() {
					pr.Writers++
				}
			}
		}
		grp := get(g)
		grp.Members = append(grp.Members, pr)
		if pr.Ready {
			grp.ReadyPods++
		}
	}
	out := make([]groupReport, 0, len(byGroup))
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		grp := byGroup[g]
		slices.SortFunc(grp.Members, func(a, b podReport) int {
			if a.NodeRank != b.NodeRank {
				return a.NodeRank - b.NodeRank
			}
			return strings.Compare(a.Name, b.Name)
		})
		grp.Ready = grp.Pods > 0 && grp.ReadyPods >= grp.Pods && len(grp.Members) == grp.Pods
		out = append(out, *grp)
	}
	return out
}

func newBackendReport(name string, cb *hicachev1alpha1.CacheBackend) *backendReport {
	if cb == nil {
		return &backendReport{Name: name}
	}
	s := &cb.Status
	return &backendReport{
		Name: name, Found: true,
		Ready:    meta.FindStatusCondition(s.Conditions, hicachev1alpha1.ConditionReady),
		KeyCount: s.KeyCount, UsedBytes: s.UsedBytes, CapacityBytes: s.CapacityBytes,
		Usage: s.Usage, Version: s.Version, Endpoints: s.Endpoints, LastProbeTime: s.LastProbeTime,
	}
}

// writeStatus writes the report as text.
func writeStatus(w io.Writer, r *statusReport) error {
	fmt.Fprintf(w, "HiCacheDeployment %s  (namespace %s)\n\n", r.Name, r.Namespace)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Ready:\t%s serving groups\n", r.Ready)
	if r.ObservedGeneration != r.Generation {
		fmt.Fprintf(tw, "Generation:\t%d, the operator has seen %d: what follows may not reflect the latest spec yet\n", r.Generation, r.ObservedGeneration)
	}
	if r.Attention != "" {
		fmt.Fprintf(tw, "Attention:\t%s\n", r.Attention)
	}
	if r.Draft != "" {
		fmt.Fprintf(tw, "Draft:\t%s\n", r.Draft)
	}
	writeStorageLine(tw, r.Storage)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nConditions:")
	if len(r.Conditions) == 0 {
		fmt.Fprintln(w, "  none yet: the operator has not reconciled this deployment (is hicache-operator running?)")
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
		for _, c := range r.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	writeGroups(w, r)
	if err := writeDuties(w, r); err != nil {
		return err
	}
	writeLayout(w, r)
	writeBackend(w, r.Backend)
	return nil
}

func writeGroups(w io.Writer, r *statusReport) {
	fmt.Fprintf(w, "\nServing groups: %s ready", r.Ready)
	if rs := r.RolesStatus; rs != nil {
		fmt.Fprintf(w, " (prefill %s, decode %s)", rs.Prefill.Ready, rs.Decode.Ready)
	} else if r.Plan != nil {
		fmt.Fprintf(w, ", %s and %s each", plural(int(r.Plan.Nodes), "pod"), plural(int(r.Plan.Ranks), "rank"))
	}
	fmt.Fprintln(w)
	if len(r.Groups) == 0 {
		fmt.Fprintln(w, "  none (spec.replicas is 0)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  GROUP\tPOD\tNODE\tREADY\tNODE RANK\tRANKS\tWRITERS")
	for _, g := range r.Groups {
		name := strconv.Itoa(g.Index)
		if g.Role != "" {
			name = g.Role + "-" + name
		}
		label := fmt.Sprintf("%s (%d/%d ready)", name, g.ReadyPods, g.Pods)
		if !g.Desired {
			label = fmt.Sprintf("%s (above its replicas, going away)", name)
		}
		if len(g.Members) == 0 {
			fmt.Fprintf(tw, "  %s\t<no pods>\t\t\t\t\t\n", label)
			continue
		}
		for i, p := range g.Members {
			if i > 0 {
				label = ""
			}
			node := p.Node
			if node == "" {
				node = "<not scheduled>"
			}
			ready := "yes"
			if !p.Ready {
				ready = "no (" + p.Phase + ")"
			}
			ranks, writers := "?", "?"
			if p.FirstRank >= 0 {
				ranks = fmt.Sprintf("%d-%d", p.FirstRank, p.LastRank)
				if p.FirstRank == p.LastRank {
					ranks = strconv.Itoa(p.FirstRank)
				}
				writers = strconv.Itoa(p.Writers)
			}
			nodeRank := "?"
			if p.NodeRank >= 0 {
				nodeRank = strconv.Itoa(p.NodeRank)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", label, p.Name, node, ready, nodeRank, ranks, writers)
		}
	}
	_ = tw.Flush()
}

func writeDuties(w io.Writer, r *statusReport) error {
	if len(r.Roles) == 0 {
		return writeDutiesOf(w, r, r.Duties, "one serving group")
	}
	for _, rd := range r.Roles {
		if err := writeDutiesOf(w, r, rd.Duties, "one "+rd.Role+" group"); err != nil {
			return err
		}
	}
	return nil
}

func writeDutiesOf(w io.Writer, r *statusReport, d dutiesReport, what string) error {
	if d.Plan == nil {
		fmt.Fprintf(w, "\nL3 duties of %s: unknown: %s\n", what, d.Note)
		return nil
	}
	writers := d.Plan.Writers()
	if r.Storage == nil {
		writers = 0
	}
	src := d.Source
	if d.Note != "" {
		src += "; " + d.Note
	}
	fmt.Fprintf(w, "\nL3 duties of %s (writers: %d of %s; %s):\n", what, writers, plural(d.Plan.NumRanks(), "rank"), src)
	if r.Storage == nil {
		fmt.Fprintln(w, "no L3 store: no rank writes to L3; the table is what each rank would do with one")
	} else {
		fmt.Fprintln(w, d.Plan.Summary())
	}
	fmt.Fprintln(w)
	return d.Plan.WriteTable(w)
}

func writeLayout(w io.Writer, r *statusReport) {
	fmt.Fprintln(w, "\nLayout:")
	c := r.Cache
	if c == nil {
		fmt.Fprintln(w, "  not decided yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ns := c.Namespace
	if ns == "" {
		ns = "none (no L3 store)"
	}
	fmt.Fprintf(tw, "  L3 namespace:\t%s\n", ns)
	fmt.Fprintf(tw, "  Layout hash:\t%s\n", c.ShortHash)
	fmt.Fprintf(tw, "  Fingerprint:\t%s\n", c.LayoutHash)
	_ = tw.Flush()

	if len(c.StaleNamespaces) == 0 {
		fmt.Fprintln(w, "\nStale namespaces: none")
	} else {
		fmt.Fprintln(w, "\nStale namespaces (written under an older layout, awaiting a flush):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAMESPACE\tLAYOUT\tSINCE\tFLUSH\tBLOCKED BY")
		for _, s := range c.StaleNamespaces {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.Namespace, dash(s.LayoutHash), timeString(&s.Since), dash(s.Flush), dash(s.BlockedBy))
		}
		_ = tw.Flush()
	}
	if c.DroppedStaleNamespaces > 0 {
		fmt.Fprintf(w, "  %d older stale namespaces were dropped from this list (it holds %d) and are no longer flushed by the operator:\n"+
			"  the StaleNamespaceDropped events name them; kubectl hicache flush BACKEND --prefix NAMESPACE removes what they hold\n",
			c.DroppedStaleNamespaces, hicachev1alpha1.MaxStaleNamespaces)
	}
	if f := c.LastFlush; f != nil {
		fmt.Fprintf(w, "\nLast flush: CacheFlush %s removed %d objects of namespace %s, completed %s\n",
			f.Name, f.Removed, f.Namespace, timeString(f.CompletionTime))
	} else {
		fmt.Fprintln(w, "\nLast flush: none")
	}
}

func writeBackend(w io.Writer, b *backendReport) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "\nCacheBackend %s:\n", b.Name)
	if !b.Found {
		fmt.Fprintf(w, "  not found: create it, or fix spec.storage.backendRef.name\n")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if c := b.Ready; c != nil {
		fmt.Fprintf(tw, "  Ready:\t%s (%s) %s\n", c.Status, c.Reason, c.Message)
	} else {
		fmt.Fprintf(tw, "  Ready:\tunknown: not probed yet\n")
	}
	fmt.Fprintf(tw, "  Objects:\t%d\n", b.KeyCount)
	usage := b.Usage
	if usage == "" {
		usage = fmt.Sprintf("%d of %d bytes", b.UsedBytes, b.CapacityBytes)
	}
	fmt.Fprintf(tw, "  Memory used:\t%s\n", usage)
	if b.Version != "" {
		fmt.Fprintf(tw, "  Version:\t%s\n", b.Version)
	}
	if e := b.Endpoints; e != nil {
		fmt.Fprintf(tw, "  Master:\t%s (admin %s)\n", dash(e.RPCAddress), dash(e.AdminURL))
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeString(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
