package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// exitBreaking is diff's exit code for a Breaking change under --exit-code.
const exitBreaking = 2

func newDiffCmd() *cobra.Command {
	var (
		output   string
		exitCode bool
	)
	cmd := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Classify a change of HiCacheDeployment spec: Breaking, Compatible or Neutral",
		Long: `diff resolves two HiCacheDeployment files (one HiCacheDeployment each; - reads one of them
from standard input) and says what moving from OLD to NEW does to the objects in the L3 store:

  Breaking    the bytes behind unchanged keys change: the operator moves to a new namespace
              (LayoutHash) or stops and flushes (Fixed) so that no reader meets stale objects
  Compatible  the keys change by themselves (page size, served model name, store): nothing flushed
  Neutral     neither keys nor bytes change: nothing to flush

It prints every changed fact in words, the old and new L3 namespace and what the operator will do.
A Breaking verdict is not an error: the exit code is 0 unless --exit-code is given, which exits
with 2 for a Breaking change.`,
		Example: `  kubectl hicache diff deployed.yaml edited.yaml
  kubectl get hcd deepseek-v4 -o yaml | kubectl hicache diff - edited.yaml --exit-code`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("diff takes two files, OLD and NEW, got %d\nRun '%s --help' for usage", len(args), cmd.CommandPath())
			}
			if args[0] == "-" && args[1] == "-" {
				return fmt.Errorf("only one of OLD and NEW can be read from standard input")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			from, err := resolveOne(source{name: args[0], in: cmd.InOrStdin()})
			if err != nil {
				return err
			}
			to, err := resolveOne(source{name: args[1], in: cmd.InOrStdin()})
			if err != nil {
				return err
			}
			if (from.roles == nil) != (to.roles == nil) {
				return fmt.Errorf("one of %s and %s has spec.roles and the other not: every serving group would be replaced, by groups of another kind; diff compares deployments that both have roles or both have none", args[0], args[1])
			}
			rep := newDiffReport(from, to)
			if from.roles != nil {
				if rep.Roles, err = roleDiffs(from.roles, to.roles); err != nil {
					return err
				}
				rep.Action = roleAction(rep)
				if rep.Kind == cache.Neutral && len(rep.Changes) == 0 {
					rep.Summary = "Neutral: the L3 layout and keys do not change"
				}
			}
			if output != outputTable {
				err = writeStructured(cmd.OutOrStdout(), output, rep)
			} else {
				err = writeDiff(cmd.OutOrStdout(), &rep)
			}
			if err != nil {
				return err
			}
			if exitCode && rep.Kind == cache.Breaking {
				return &exitError{code: exitBreaking}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", outputTable, "output format: "+strings.Join(outputFormats, ", "))
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, fmt.Sprintf("exit with %d when the change is Breaking (like git diff --exit-code)", exitBreaking))
	return cmd
}

// side is one resolved file of a diff. With roles, loaded and res are the prefill's (whose
// layout makes the namespace both roles write) and roles holds both.
type side struct {
	loaded
	res   *resolve.Resolved
	roles *resolve.Roles
}

// resolveOne loads the single HiCacheDeployment of a source and resolves it.
func resolveOne(src source) (side, error) {
	items, err := loadDeployments(src)
	if err != nil {
		return side{}, err
	}
	if len(items) != 1 {
		return side{}, fmt.Errorf("%s: holds %d HiCacheDeployments; diff compares one against one: split the file", src.displayName(), len(items))
	}
	if items[0].hcd.Spec.Roles != nil {
		roles, err := resolve.RolesOf(items[0].hcd)
		if err != nil {
			return side{}, fmt.Errorf("%s: %w", items[0].where, err)
		}
		it := items[0]
		it.hcd = roles.Prefill.Spec
		return side{loaded: it, res: roles.Prefill.Resolved, roles: roles}, nil
	}
	r, err := resolve.Resolve(items[0].hcd)
	if err != nil {
		return side{}, fmt.Errorf("%s: %w", items[0].where, err)
	}
	return side{loaded: items[0], res: r}, nil
}

// roleDiff is what a change does to the servers of one role.
type roleDiff struct {
	Role string `json:"role"`
	// Rolls is true when the role's servers run another command line or pod: its groups are
	// replaced. Scales is true when only its number of groups changes.
	Rolls  bool   `json:"rolls"`
	Scales bool   `json:"scales"`
	Why    string `json:"why,omitempty"`
}

// roleDiffs compares the servers of each role of two deployments with roles.
func roleDiffs(from, to *resolve.Roles) ([]roleDiff, error) {
	out := make([]roleDiff, 0, 2)
	old, cur := from.Each(), to.Each()
	for i := range old {
		a, b := old[i], cur[i]
		d := roleDiff{Role: string(a.Role), Scales: a.Replicas != b.Replicas}
		argsA, err := roleCommand(from, a)
		if err != nil {
			return nil, err
		}
		argsB, err := roleCommand(to, b)
		if err != nil {
			return nil, err
		}
		podA, _ := json.Marshal([]any{a.Spec.Spec.SGLang, a.Spec.Spec.Resources, a.Spec.Spec.Template, a.Spec.Spec.Model.Source})
		podB, _ := json.Marshal([]any{b.Spec.Spec.SGLang, b.Spec.Spec.Resources, b.Spec.Spec.Template, b.Spec.Spec.Model.Source})
		switch {
		case strings.Join(argsA, "\x00") != strings.Join(argsB, "\x00"):
			d.Rolls, d.Why = true, "its SGLang command line changes"
		case string(podA) != string(podB):
			d.Rolls, d.Why = true, "its pods change (image, resources or template)"
		}
		out = append(out, d)
	}
	return out, nil
}

func roleCommand(roles *resolve.Roles, rr *resolve.RoleResolved) ([]string, error) {
	cfg, _, err := resolve.RoleServerConfig(roles, rr, planBackend(), placeholderLeader)
	if err != nil {
		return nil, err
	}
	args, err := sglang.Args(cfg)
	if err != nil {
		return nil, fmt.Errorf("the %s role: %w", rr.Role, resolve.SpecError(err))
	}
	return args, nil
}

// diffReport is the structured output of diff.
type diffReport struct {
	Old string `json:"old"`
	New string `json:"new"`
	// Kind is the verdict: Breaking, Compatible or Neutral.
	Kind cache.ChangeKind `json:"kind"`
	// Summary is the verdict in one line.
	Summary string             `json:"summary"`
	Changes []cache.FactChange `json:"changes"`
	// OldNamespace and NewNamespace are the L3 namespaces the two specs write under
	// (spec.storage.namespace with the Fixed strategy).
	OldNamespace      string `json:"oldNamespace"`
	NewNamespace      string `json:"newNamespace"`
	NamespaceStrategy string `json:"namespaceStrategy,omitempty"`
	// Action is what the operator does to move from OLD to NEW.
	Action string `json:"action"`
	// Roles says, for deployments with prefill and decode roles, which role's groups the change
	// rolls; the namespace is the one both roles share.
	Roles []roleDiff `json:"roles,omitempty"`
}

func newDiffReport(from, to side) diffReport {
	ch := cache.Classify(effective(from.res.Config(from.hcd)), effective(to.res.Config(to.hcd)))
	rep := diffReport{
		Old:          from.source,
		New:          to.source,
		Kind:         ch.Kind,
		Summary:      ch.String(),
		Changes:      ch.Changes,
		OldNamespace: from.res.Namespace,
		NewNamespace: to.res.Namespace,
	}
	if rep.Changes == nil {
		rep.Changes = []cache.FactChange{}
	}
	if s := to.hcd.Spec.Storage; s != nil {
		rep.NamespaceStrategy = string(s.NamespaceStrategy)
	}
	rep.Action = action(ch.Kind, from.hcd.Spec.Storage, to.hcd.Spec.Storage, rep.OldNamespace, rep.NewNamespace)
	return rep
}

// effective fills in the settings a spec leaves to SGLang with the defaults of the pinned release
// (its argument table), so that a diff speaks of the value that runs ("write_through", not
// "none") and writing a default out is no change.
func effective(c cache.Config) cache.Config {
	spec, err := argspec.Default()
	if err != nil {
		return c
	}
	s := &c.Settings
	for _, f := range []struct {
		flag  string
		value *string
	}{
		{"--hicache-write-policy", &s.WritePolicy},
		{"--hicache-io-backend", &s.IOBackend},
		{"--hicache-host-memory-mode", &s.HostMemoryMode},
		{"--hicache-storage-prefetch-policy", &s.PrefetchPolicy},
	} {
		if *f.value != "" {
			continue
		}
		a, ok := spec.Lookup(f.flag)
		var def string
		if ok && json.Unmarshal(a.Default, &def) == nil {
			*f.value = def
		}
	}
	return c
}

// action says what the operator does to move from the old spec to the new one, following the
// namespace strategy and flush policy of the new spec.
func action(kind cache.ChangeKind, oldStore, newStore *hicachev1alpha1.StorageSpec, oldNS, newNS string) string {
	switch {
	case newStore == nil && oldStore == nil:
		return "nothing to flush: neither spec has an L3 store (spec.storage)"
	case newStore == nil:
		return fmt.Sprintf("stops writing to the L3 store (spec.storage is removed); namespace %s is left as it is", oldNS)
	case oldStore == nil:
		return fmt.Sprintf("starts writing to namespace %s of the new L3 store; nothing to flush", newNS)
	}
	switch kind {
	case cache.Breaking:
		if newStore.NamespaceStrategy == hicachev1alpha1.NamespaceFixed {
			return fmt.Sprintf("stops every writer, flushes namespace %s, then starts the new generation", newNS)
		}
		if newStore.FlushPolicy == hicachev1alpha1.FlushManual {
			return fmt.Sprintf("moves writers to namespace %s and records %s as stale for a manual flush (flushPolicy Manual)", newNS, oldNS)
		}
		return fmt.Sprintf("moves writers to namespace %s and flushes %s once nothing uses it", newNS, oldNS)
	case cache.Compatible:
		if oldNS != newNS {
			return fmt.Sprintf("new keys, nothing flushed: writers move from namespace %s to %s", oldNS, newNS)
		}
		return fmt.Sprintf("new keys, nothing flushed: the old objects in namespace %s are no longer read and age out", newNS)
	default:
		if oldNS != newNS {
			return fmt.Sprintf("nothing to flush: writers move from namespace %s to %s (the layout is unchanged)", oldNS, newNS)
		}
		return fmt.Sprintf("nothing to flush: the new spec reads and writes the same objects in namespace %s", newNS)
	}
}

// roleAction adds to the action which roles' groups roll.
func roleAction(rep diffReport) string {
	var rolls []string
	for _, r := range rep.Roles {
		if r.Rolls {
			rolls = append(rolls, r.Role)
		}
	}
	switch {
	case len(rolls) == 0:
		return rep.Action + "; no role's groups roll"
	case len(rolls) == len(rep.Roles):
		return rep.Action + "; both roles' groups roll"
	default:
		return rep.Action + "; only the " + rolls[0] + " groups roll"
	}
}

var kindHeadings = []struct {
	kind    cache.ChangeKind
	heading string
}{
	{cache.Breaking, "Breaking (the bytes behind unchanged keys change)"},
	{cache.Compatible, "Compatible (the keys change)"},
	{cache.Neutral, "Neutral (neither keys nor bytes change)"},
}

func writeDiff(w io.Writer, rep *diffReport) error {
	fmt.Fprintf(w, "%s\n", rep.Summary)
	for _, kh := range kindHeadings {
		ch := cache.Change{Changes: rep.Changes}
		descs := ch.Descriptions(kh.kind)
		if len(descs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", kh.heading)
		for _, d := range descs {
			fmt.Fprintf(w, "  - %s\n", d)
		}
	}
	fmt.Fprintln(w)
	ns := rep.NewNamespace
	if rep.OldNamespace != rep.NewNamespace {
		ns = rep.OldNamespace + " → " + rep.NewNamespace
	} else {
		ns += " (unchanged)"
	}
	if rep.NamespaceStrategy != "" {
		ns += ", strategy " + rep.NamespaceStrategy
	}
	fmt.Fprintf(w, "L3 namespace: %s\n", ns)
	for _, r := range rep.Roles {
		what := "unchanged"
		switch {
		case r.Rolls:
			what = "rolls: " + r.Why
		case r.Scales:
			what = "scales, nothing rolls"
		}
		fmt.Fprintf(w, "%-13s %s\n", roleTitle(r.Role)+":", what)
	}
	_, err := fmt.Fprintf(w, "Operator:     %s\n", rep.Action)
	return err
}
