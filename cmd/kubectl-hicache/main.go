// Command kubectl-hicache is the kubectl plugin of hicache-operator. Installed on PATH as
// kubectl-hicache, it runs as "kubectl hicache".
//
// plan and diff work on HiCacheDeployment files and need no cluster: they show what the operator
// will decide (per-rank L3 duties, layout fingerprint, L3 namespace) and what a change of spec
// does to the objects in the L3 store.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the plugin with args and returns the process exit code: 0 on success, 1 on an
// error (its message on errOut), or the code a command asked for (diff --exit-code).
func run(args []string, in io.Reader, out, errOut io.Writer) int {
	cmd := newRootCmd(out, errOut)
	cmd.SetIn(in)
	cmd.SetArgs(args)
	err := cmd.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(errOut, "error: %v\n", err)
	return 1
}

// exitError ends the command with a code and no message: the command has already said
// everything on its output.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// newRootCmd builds the "kubectl hicache" command tree writing to out and errOut. Commands that
// read standard input take it from the command's input (SetIn).
func newRootCmd(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-hicache",
		Short: "Plan and inspect SGLang HiCache deployments of hicache-operator",
		Long: `kubectl hicache shows what hicache-operator decides for a HiCacheDeployment: which rank
writes which pool to the L3 store, the layout fingerprint and L3 namespace, and what a change of
spec does to the objects already in the store. plan and diff read files and need no cluster.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl hicache"},
		// Without a subcommand, show the help instead of doing nothing.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w\nRun '%s --help' for usage", err, cmd.CommandPath())
	})
	root.AddCommand(newPlanCmd(), newDiffCmd())
	return root
}

// Output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var outputFormats = []string{outputTable, outputJSON, outputYAML}

// checkOutput rejects an unknown -o value with the ones that exist.
func checkOutput(format string) error {
	if slices.Contains(outputFormats, format) {
		return nil
	}
	return fmt.Errorf("-o %q is not an output format: use %s", format, strings.Join(outputFormats, ", "))
}

// writeStructured writes v as indented JSON or as YAML.
func writeStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == outputYAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
