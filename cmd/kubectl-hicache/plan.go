package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/hfcli"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/router"
	"github.com/hicache-io/hicache-operator/internal/sglang"
)

func newPlanCmd() *cobra.Command {
	var (
		files  []string
		output string
	)
	cmd := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Show the group shape, per-rank L3 duties and L3 layout of HiCacheDeployments",
		Long: `plan reads HiCacheDeployments from files (or - for standard input), applies the CRD's
defaults and shows what the operator decides, without a cluster: the shape of a serving group,
which rank writes which pool to the L3 store, warnings, the layout facts with their fingerprint,
and the L3 namespace the deployment writes under. Every HiCacheDeployment of a multi-document
file is planned; documents of other kinds are skipped.`,
		Example: `  kubectl hicache plan -f deepseek-v4.yaml
  kubectl hicache plan -f qwen3.yaml -f qwen3-next.yaml
  kubectl get hcd deepseek-v4 -o yaml | kubectl hicache plan -f - -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("plan takes its files with -f, e.g. %s -f %s", cmd.CommandPath(), args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return fmt.Errorf("-f is required: name a HiCacheDeployment file, or - for standard input")
			}
			if err := checkOutput(output); err != nil {
				return err
			}
			if len(slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f != "-" })) > 1 {
				return fmt.Errorf("-f - is given twice: standard input can be read only once")
			}
			var reports []planReport
			for _, f := range files {
				items, err := loadDeployments(source{name: f, in: cmd.InOrStdin()})
				if err != nil {
					return err
				}
				for _, it := range items {
					rep, err := planOne(it)
					if err != nil {
						return fmt.Errorf("%s: %w", it.where, err)
					}
					reports = append(reports, rep)
				}
			}
			if output != outputTable {
				return writeStructured(cmd.OutOrStdout(), output, planList{Deployments: reports})
			}
			return writePlans(cmd.OutOrStdout(), reports)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "HiCacheDeployment YAML or JSON file, or - for standard input; repeat for several files")
	cmd.Flags().StringVarP(&output, "output", "o", outputTable, "output format: "+strings.Join(outputFormats, ", "))
	return cmd
}

// planList is the structured output of plan: one entry per HiCacheDeployment, in file order.
type planList struct {
	Deployments []planReport `json:"deployments"`
}

// planReport is everything plan shows about one HiCacheDeployment.
type planReport struct {
	Name      string              `json:"name,omitempty"`
	Source    string              `json:"source"`
	Profile   string              `json:"profile,omitempty"`
	Attention cache.AttentionKind `json:"attention"`
	Draft     string              `json:"draft"`
	Group     groupShape          `json:"group"`
	// Summary is who writes what in one line; Writers the ranks of one group with a write duty.
	Summary string         `json:"summary"`
	Writers int            `json:"writers"`
	Plan    cache.RankPlan `json:"plan"`
	// Warnings are the plan's warnings in words (also in plan.warnings with their codes).
	Warnings []string     `json:"warnings,omitempty"`
	Storage  *storageInfo `json:"storage,omitempty"`
	Layout   layoutReport `json:"layout"`
	// SGLang is the image, the release read from it and the arguments its command line is
	// checked against.
	SGLang string `json:"sglang"`
	// Weights says where the server finds the model's weights; Download is the init container's
	// command line of a hub source.
	Weights  string   `json:"weights"`
	Download []string `json:"download,omitempty"`
	// StartupSeconds is how long a rank may take to start serving, and StartupRule where the
	// figure comes from.
	StartupSeconds int32  `json:"startupSeconds"`
	StartupRule    string `json:"startupRule"`
	// Command is the SGLang command line every rank of a group runs, with placeholders for
	// what only the cluster knows (the master's address, the leader's name, the node rank).
	Command []string `json:"command"`
	// Roles are the prefill and decode roles of a disaggregated deployment, each with its own
	// group, duties and command line; Group, Plan and Command are then those of the prefill.
	Roles []rolePlanReport `json:"roles,omitempty"`
	// Transfer is the KV transfer between the roles.
	Transfer *hicachev1alpha1.TransferSpec `json:"transfer,omitempty"`
	// Router is the router in front of the groups (spec.router).
	Router *routerPlanReport `json:"router,omitempty"`
}

// routerPlanReport is what plan shows of the router (spec.router): where it runs, which servers
// it discovers and its command line, checked against the pinned router's arguments.
type routerPlanReport struct {
	// Deployment is the router's Deployment; Namespace is where it runs and discovers servers.
	Deployment string `json:"deployment"`
	Namespace  string `json:"namespace"`
	Replicas   int32  `json:"replicas"`
	// Image is spec.router.image, empty for the operator's default router image.
	Image string `json:"image,omitempty"`
	// Mode is "regular" (one kind of server) or "prefill/decode".
	Mode string `json:"mode"`
	// Workers are the servers it discovers: one entry without roles, prefill then decode with.
	Workers []routerWorkers `json:"workers"`
	// Release is the router release the command line was checked against ("smg 1.13.0").
	Release string   `json:"release"`
	Command []string `json:"command"`
}

// routerWorkers are the servers of one kind the router discovers and how it chooses among them.
type routerWorkers struct {
	// Role is prefill or decode; empty without spec.roles.
	Role string `json:"role,omitempty"`
	// Selector is the label selector the router watches pods with, as on its command line.
	Selector string `json:"selector"`
	// Groups are the serving groups (StatefulSets) whose leader, pod 0, the selector chooses.
	Groups []string `json:"groups"`
	Policy string   `json:"policy"`
}

// rolePlanReport is what plan shows about one role.
type rolePlanReport struct {
	Role string `json:"role"`
	// L3 is whether the role's servers read and write L3, and why.
	L3       cache.RoleL3   `json:"l3"`
	Group    groupShape     `json:"group"`
	Summary  string         `json:"summary"`
	Writers  int            `json:"writers"`
	Plan     cache.RankPlan `json:"plan"`
	Warnings []string       `json:"warnings,omitempty"`
	// Memory is what the role's ranks lend to the L3 store.
	Memory  *storeMemory `json:"memory,omitempty"`
	Command []string     `json:"command"`
}

// planOne plans one deployment, with or without roles, and its router.
func planOne(it loaded) (planReport, error) {
	rep, err := planServers(it)
	if err != nil || it.hcd.Spec.Router == nil {
		return rep, err
	}
	rep.Router, err = newRouterPlan(it.hcd)
	return rep, err
}

// planServers plans the serving groups of one deployment, with or without roles.
func planServers(it loaded) (planReport, error) {
	if it.hcd.Spec.Roles == nil {
		r, err := resolve.Resolve(it.hcd)
		if err != nil {
			return planReport{}, err
		}
		return newPlanReport(it, r)
	}
	roles, err := resolve.RolesOf(it.hcd)
	if err != nil {
		return planReport{}, err
	}
	rep, err := newPlanReport(loaded{hcd: roles.Prefill.Spec, source: it.source, where: it.where}, roles.Prefill.Resolved)
	if err != nil {
		return rep, err
	}
	rep.Name = it.hcd.Name
	rep.Storage = newStorageInfo(it.hcd.Spec.Storage, nil)
	rep.Transfer = &roles.Transfer
	for _, rr := range roles.Each() {
		rr := rr
		cfg, _, err := resolve.RoleServerConfig(roles, rr, planBackend(), placeholderLeader)
		if err != nil {
			return rep, err
		}
		args, err := sglang.Args(cfg)
		if err != nil {
			return rep, fmt.Errorf("the %s role: %w", rr.Role, resolve.SpecError(err))
		}
		rp := rolePlanReport{
			Role: string(rr.Role), L3: rr.L3, Group: newGroupShape(rr.Resolved),
			Summary: rr.Plan.Summary(), Writers: rr.Writers(), Plan: rr.Plan,
			Command: append(sglang.Command(), args...),
		}
		if !rr.L3.Writes {
			rp.Summary = "no L3 duties: " + rr.L3.Reason
		}
		for _, w := range rr.Plan.Warnings {
			rp.Warnings = append(rp.Warnings, w.Message)
		}
		if it.hcd.Spec.Storage != nil {
			rp.Memory = newStorageInfo(it.hcd.Spec.Storage, rr.Resolved).Memory
		}
		rep.Roles = append(rep.Roles, rp)
	}
	return rep, nil
}

// newRouterPlan is the router of a deployment with spec.router, as the operator runs it: the
// command line of resolve.RouterConfig, which router.Args checks against the pinned router's
// argument table, and the groups whose leaders each of its selectors chooses.
func newRouterPlan(hcd *hicachev1alpha1.HiCacheDeployment) (*routerPlanReport, error) {
	h := hcd.DeepCopy()
	if h.Namespace == "" {
		h.Namespace = defaultNamespace
	}
	cfg, err := resolve.RouterConfig(h)
	if err != nil {
		return nil, err
	}
	args, err := router.Args(cfg)
	if err != nil {
		return nil, fmt.Errorf("spec.router: %w", err)
	}
	spec, err := router.Spec()
	if err != nil {
		return nil, err
	}
	rep := &routerPlanReport{
		Deployment: h.Name + "-router", Namespace: h.Namespace, Replicas: max(h.Spec.Router.Replicas, 1),
		Image: h.Spec.Router.Image, Mode: "regular",
		Release: spec.Program() + " " + spec.Version(), Command: append(router.Command(), args...),
	}
	policy := cmp.Or(cfg.Policy, router.DefaultPolicy)
	if !cfg.PD() {
		rep.Workers = []routerWorkers{{Selector: selectorString(cfg.Selector), Groups: groupNames(h.Name, "", int(ptrOr(h.Spec.Replicas, 1))), Policy: policy}}
		return rep, nil
	}
	rep.Mode = "prefill/decode"
	r := h.Spec.Roles
	rep.Workers = []routerWorkers{
		{Role: string(hicachev1alpha1.RolePrefill), Selector: selectorString(cfg.PrefillSelector),
			Groups: groupNames(h.Name, hicachev1alpha1.RolePrefill, int(ptrOr(r.Prefill.Replicas, 1))), Policy: cmp.Or(cfg.PrefillPolicy, policy)},
		{Role: string(hicachev1alpha1.RoleDecode), Selector: selectorString(cfg.DecodeSelector),
			Groups: groupNames(h.Name, hicachev1alpha1.RoleDecode, int(ptrOr(r.Decode.Replicas, 1))), Policy: cmp.Or(cfg.DecodePolicy, policy)},
	}
	return rep, nil
}

// groupNames are the StatefulSets of n serving groups of a role: <name>-<g> without roles,
// <name>-<role>-<g> with them.
func groupNames(name string, role hicachev1alpha1.Role, n int) []string {
	prefix := name + "-"
	if role != "" {
		prefix += string(role) + "-"
	}
	out := make([]string, n)
	for g := range n {
		out[g] = prefix + strconv.Itoa(g)
	}
	return out
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// selectorString is a label selector as kubectl writes it: key=value pairs, sorted, with commas.
func selectorString(sel map[string]string) string {
	parts := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

func planBackend() *resolve.Backend {
	return &resolve.Backend{RPCAddress: placeholderMaster, MetadataServer: hicachev1alpha1.DefaultMetadataServer,
		MetricsPort: int(hicachev1alpha1.DefaultAdminPort)}
}

func newGroupShape(r *resolve.Resolved) groupShape {
	return groupShape{
		GPUs: r.GPUs, Nodes: r.Nodes, GPUsPerPod: r.GPUsPerPod, Replicas: r.Replicas,
		TensorParallel:   r.Topology.TensorParallel,
		PipelineParallel: r.Topology.PipelineParallel,
		DataParallel:     r.Topology.DataParallel,
		DPAttention:      r.Topology.DPAttention,
	}
}

// groupShape is the size of one serving group.
type groupShape struct {
	GPUs             int  `json:"gpus"`
	Nodes            int  `json:"nodes"`
	GPUsPerPod       int  `json:"gpusPerPod"`
	Replicas         int  `json:"replicas"`
	TensorParallel   int  `json:"tensorParallel"`
	PipelineParallel int  `json:"pipelineParallel"`
	DataParallel     int  `json:"dataParallel"`
	DPAttention      bool `json:"dpAttention,omitempty"`
}

// storageInfo is the L3 store a deployment writes to.
type storageInfo struct {
	Backend           string `json:"backend"`
	NamespaceStrategy string `json:"namespaceStrategy"`
	FlushPolicy       string `json:"flushPolicy"`
	Protocol          string `json:"protocol"`
	// Memory is what the ranks lend to the store; nil when the spec cannot be resolved.
	Memory *storeMemory `json:"memory,omitempty"`
}

// storeMemory is the memory the ranks of a deployment lend to the L3 store.
type storeMemory struct {
	// PerRank is spec.storage.globalSegmentSize, the segment each rank mounts (0: pure clients).
	PerRank int64 `json:"perRank"`
	// GlobalSegmentSize is what the operator renders: SGLang divides it by attention-TP × PP.
	GlobalSegmentSize int64 `json:"globalSegmentSize"`
	// PerPod is added to each rank pod's memory request; PerGroup is one serving group's total.
	PerPod   int64 `json:"perPod"`
	PerGroup int64 `json:"perGroup"`
	// AttentionTP and PipelineParallel are SGLang's divisor.
	AttentionTP      int `json:"attentionTP"`
	PipelineParallel int `json:"pipelineParallel"`
}

func newStorageInfo(s *hicachev1alpha1.StorageSpec, r *resolve.Resolved) *storageInfo {
	if s == nil {
		return nil
	}
	info := &storageInfo{
		Backend:           s.BackendRef.Name,
		NamespaceStrategy: string(s.NamespaceStrategy),
		FlushPolicy:       string(s.FlushPolicy),
		Protocol:          string(s.Protocol),
	}
	if r != nil {
		info.Memory = &storeMemory{
			PerRank: r.SegmentPerRank, GlobalSegmentSize: r.GlobalSegmentSize,
			PerPod: r.SegmentPerPod(), PerGroup: r.SegmentPerGroup(),
			AttentionTP: r.Plan.AttentionTP, PipelineParallel: r.Plan.PipelineParallel,
		}
	}
	return info
}

// layoutReport is the L3 layout: the facts, their fingerprint and the namespace.
type layoutReport struct {
	Fingerprint string       `json:"fingerprint"`
	ShortHash   string       `json:"shortHash"`
	Namespace   string       `json:"namespace"`
	Facts       []factReport `json:"facts"`
}

// factReport is one layout fact.
type factReport struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	Value string `json:"value"`
}

// Placeholders of the rendered command line for what only the cluster knows.
const (
	placeholderMaster = "<mooncake-master>:50051"
	placeholderLeader = "<group-leader>:20102"
)

func newPlanReport(it loaded, r *resolve.Resolved) (planReport, error) {
	spec := &it.hcd.Spec
	rep := planReport{
		Name:      it.hcd.Name,
		Source:    it.source,
		Profile:   r.Topology.Profile,
		Attention: r.Topology.Attention,
		Draft:     r.DraftSummary(),
		Group:     newGroupShape(r),
		Summary:   r.Plan.Summary(),
		Writers:   r.Writers(),
		Plan:      r.Plan,
		Layout: layoutReport{
			Fingerprint: r.Fingerprint,
			ShortHash:   r.ShortHash,
			Namespace:   r.Namespace,
		},
	}
	for _, w := range r.Plan.Warnings {
		rep.Warnings = append(rep.Warnings, w.Message)
	}
	rep.Storage = newStorageInfo(spec.Storage, r)
	model, err := resolve.Model(spec)
	if err != nil {
		return rep, err
	}
	rep.Weights = model.Describe()
	rep.SGLang = r.SGLang.Describe()
	if src := spec.Model.Source; src != nil && src.Hub != nil {
		rep.Download = hfcli.DownloadCommand(src.Hub.Repo, spec.Model.Revision, model.Path)
	}
	rep.StartupSeconds, rep.StartupRule = resolve.StartupBudget(spec, r)
	for _, name := range slices.Sorted(maps.Keys(r.Facts)) {
		rep.Layout.Facts = append(rep.Layout.Facts, factReport{Name: name, Label: cache.FactLabel(name), Value: r.Facts[name]})
	}
	cfg, _, err := resolve.ServerConfig(it.hcd, r, planBackend(), placeholderLeader)
	if err != nil {
		return rep, err
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		return rep, resolve.SpecError(err)
	}
	rep.Command = append(sglang.Command(), args...)
	return rep, nil
}

// writePlans writes the plans as text, a blank line between deployments.
func writePlans(w io.Writer, reports []planReport) error {
	for i := range reports {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := writePlan(w, &reports[i]); err != nil {
			return err
		}
	}
	return nil
}

func writePlan(w io.Writer, p *planReport) error {
	name := p.Name
	if name == "" {
		name = "(no name)"
	}
	fmt.Fprintf(w, "HiCacheDeployment %s  (%s)\n\n", name, p.Source)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	profile := p.Profile
	if profile == "" {
		profile = "none (topology from spec.topology)"
	}
	fmt.Fprintf(tw, "Profile:\t%s\n", profile)
	fmt.Fprintf(tw, "Attention:\t%s\n", p.Attention)
	fmt.Fprintf(tw, "Draft:\t%s\n", p.Draft)
	fmt.Fprintf(tw, "SGLang:\t%s\n", p.SGLang)
	fmt.Fprintf(tw, "Weights:\t%s\n", p.Weights)
	if len(p.Download) > 0 {
		fmt.Fprintf(tw, "Download:\t%s (init container, serving image)\n", strings.Join(p.Download, " "))
	}
	fmt.Fprintf(tw, "Startup budget:\t%d s (%s)\n", p.StartupSeconds, p.StartupRule)
	if len(p.Roles) > 0 {
		if err := writeRoles(w, tw, p); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(tw, "Serving group:\t%s\n", groupLine(p.Group))
		fmt.Fprintf(tw, "Replicas:\t%d\n", p.Group.Replicas)
		writeStorageLine(tw, p.Storage)
		if err := tw.Flush(); err != nil {
			return err
		}

		fmt.Fprintf(w, "\nL3 duties of one serving group (writers: %d of %s):\n", p.Writers, plural(p.Plan.NumRanks(), "rank"))
		fmt.Fprintf(w, "%s\n\n", p.Summary)
		if err := p.Plan.WriteTable(w); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nLayout:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  Fingerprint:\t%s\n", p.Layout.Fingerprint)
	fmt.Fprintf(tw, "  Short hash:\t%s\n", p.Layout.ShortHash)
	ns := p.Layout.Namespace
	if p.Storage == nil {
		ns += " (used once spec.storage is set)"
	} else if p.Storage.NamespaceStrategy == string(hicachev1alpha1.NamespaceFixed) {
		ns += " (Fixed: spec.storage.namespace)"
	}
	if len(p.Roles) > 0 {
		ns += " (shared by both roles: decode servers continue the prefill's keys)"
	}
	fmt.Fprintf(tw, "  L3 namespace:\t%s\n", ns)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range p.Roles {
		fmt.Fprintf(w, "\nSGLang command line of every %s rank ($(NODE_RANK) and $(POD_IP) come from the pod):\n", r.Role)
		writeCommand(w, r.Command)
	}
	if len(p.Roles) == 0 {
		fmt.Fprintln(w, "\nSGLang command line of every rank ($(NODE_RANK) and $(POD_IP) come from the pod):")
		writeCommand(w, p.Command)
	}
	fmt.Fprintln(w, "\nLayout facts:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  FACT\tNAME\tVALUE")
	for _, f := range p.Layout.Facts {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Label, f.Name, f.Value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case p.Router != nil:
		return writeRouter(w, p.Router)
	case len(p.Roles) > 0:
		fmt.Fprintf(w, "\nRouter: none (spec.router is not set). With spec.roles the client Service %s fronts only the router, which sends each request to a prefill and a decode server together: set spec.router for clients to reach the servers.\n", name)
	}
	return nil
}

// groupLine is one serving group's shape in words.
func groupLine(g groupShape) string {
	parallel := fmt.Sprintf("TP %d × PP %d × DP %d", g.TensorParallel, g.PipelineParallel, g.DataParallel)
	if g.DPAttention {
		parallel += ", DP attention"
	}
	return fmt.Sprintf("%s on %s, %s per pod (%s)", plural(g.GPUs, "GPU"), plural(g.Nodes, "node"), plural(g.GPUsPerPod, "GPU"), parallel)
}

// writeRoles writes the roles of a disaggregated deployment: their groups and L3 duties.
func writeRoles(w io.Writer, tw *tabwriter.Writer, p *planReport) error {
	t := p.Transfer
	transfer := fmt.Sprintf("KV from prefill to decode over %s, bootstrap port %d", t.Backend, t.BootstrapPort)
	if t.IBDevice != "" {
		transfer += ", RDMA devices " + t.IBDevice
	}
	fmt.Fprintf(tw, "Roles:\tprefill and decode (%s)\n", transfer)
	for _, r := range p.Roles {
		fmt.Fprintf(tw, "%s groups:\t%d × %s\n", roleTitle(r.Role), r.Group.Replicas, groupLine(r.Group))
	}
	writeStorageLine(tw, p.Storage)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range p.Roles {
		reads := map[bool]string{true: "reads", false: "does not read"}[r.L3.Reads]
		writes := map[bool]string{true: "writes", false: "does not write"}[r.L3.Writes]
		fmt.Fprintf(w, "\n%s role: %s and %s L3 (%s).\n", roleTitle(r.Role), reads, writes, r.L3.Reason)
		if m := r.Memory; m != nil && m.PerRank > 0 {
			fmt.Fprintf(w, "Each %s rank lends %s to the store (global_segment_size %s); %s per pod, %s per group.\n",
				r.Role, bytesQ(m.PerRank), bytesQ(m.GlobalSegmentSize), bytesQ(m.PerPod), bytesQ(m.PerGroup))
		}
		fmt.Fprintf(w, "L3 duties of one %s group (writers: %d of %s):\n", r.Role, r.Writers, plural(r.Plan.NumRanks(), "rank"))
		fmt.Fprintf(w, "%s\n", r.Summary)
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "Warning: %s\n", warn)
		}
		if r.L3.Writes {
			fmt.Fprintln(w)
			if err := r.Plan.WriteTable(w); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeRouter writes the router: where it runs, which groups' leaders it discovers, and its
// command line.
func writeRouter(w io.Writer, r *routerPlanReport) error {
	image := r.Image
	if image == "" {
		image = "the operator's default router image (--default-router-image)"
	}
	fmt.Fprintf(w, "\nRouter: Deployment %s in namespace %s, %s, %s mode, image %s\n", r.Deployment, r.Namespace, plural(int(r.Replicas), "replica"), r.Mode, image)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, wk := range r.Workers {
		title := "Servers"
		if wk.Role != "" {
			title = roleTitle(wk.Role) + " servers"
		}
		fmt.Fprintf(tw, "  %s:\t%s, policy %s\n", title, leadersOf(wk.Groups), wk.Policy)
		fmt.Fprintf(tw, "  \tselected by %s while Ready\n", wk.Selector)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nRouter command line (accepted by %s's argument definitions):\n", r.Release)
	writeCommand(w, r.Command)
	return nil
}

// leadersOf is, in words, the leaders of some serving groups.
func leadersOf(groups []string) string {
	switch len(groups) {
	case 0:
		return "none (no groups)"
	case 1:
		return "the leader (pod 0) of " + groups[0]
	}
	return "the leaders (pod 0) of " + strings.Join(groups, ", ")
}

func roleTitle(role string) string {
	if role == "" {
		return role
	}
	return strings.ToUpper(role[:1]) + role[1:]
}

// plural is "1 GPU", "16 GPUs".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// writeStorageLine is the "L3 store" line of plan and status.
func writeStorageLine(w io.Writer, s *storageInfo) {
	if s == nil {
		fmt.Fprintf(w, "L3 store:\tnone (spec.storage is not set): the cache stops at host memory\n")
		return
	}
	fmt.Fprintf(w, "L3 store:\tCacheBackend %s, namespace strategy %s, flush policy %s, protocol %s\n",
		s.Backend, s.NamespaceStrategy, s.FlushPolicy, s.Protocol)
	switch m := s.Memory; {
	case m == nil:
	case m.PerRank == 0:
		fmt.Fprintf(w, "L3 memory:\tnone lent by the ranks (spec.storage.globalSegmentSize is 0 or unset): they are pure clients of the backend's store pods\n")
	default:
		fmt.Fprintf(w, "L3 memory:\teach rank lends %s (global_segment_size %s, which SGLang divides by attention-TP %d × PP %d); %s per pod, added to its memory request; %s per serving group\n",
			bytesQ(m.PerRank), bytesQ(m.GlobalSegmentSize), m.AttentionTP, m.PipelineParallel, bytesQ(m.PerPod), bytesQ(m.PerGroup))
	}
}

// bytesQ writes a byte count as a Kubernetes quantity, such as 16Gi.
func bytesQ(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// writeCommand writes a command line one flag (with its value) per line.
func writeCommand(w io.Writer, argv []string) {
	line := "  "
	for i, a := range argv {
		if i > 0 && strings.HasPrefix(a, "--") {
			fmt.Fprintln(w, line+" \\")
			line = "     "
		}
		if strings.ContainsAny(a, " {}\"'<>$()") {
			a = "'" + a + "'"
		}
		if line == "  " || line == "     " {
			line += a
		} else {
			line += " " + a
		}
	}
	fmt.Fprintln(w, line)
}
