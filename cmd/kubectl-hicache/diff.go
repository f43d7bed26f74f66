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
			rep := newDiffReport(from, to)
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

// side is one resolved file of a diff.
type side struct {
	loaded
	res *resolve.Resolved
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
	r, err := resolve.Resolve(items[0].hcd)
	if err != nil {
		return side{}, fmt.Errorf("%s: %w", items[0].where, err)
	}
	return side{loaded: items[0], res: r}, nil
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
	_, err := fmt.Fprintf(w, "Operator:     %s\n", rep.Action)
	return err
}
