// Command kubectl-hicache is the kubectl plugin of hicache-operator. Installed on PATH as
// kubectl-hicache, it runs as "kubectl hicache".
//
// plan and diff work on HiCacheDeployment files and need no cluster: they show what the operator
// will decide (per-rank L3 duties, layout fingerprint, L3 namespace) and what a change of spec
// does to the objects in the L3 store. flush and status talk to a cluster, as kubectl does: flush
// removes objects from a CacheBackend's store through a CacheFlush and follows it; status shows a
// running HiCacheDeployment with its pods, duties, layout and backend.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

func main() {
	// The plugin reports through its output and errors, not logs.
	ctrllog.SetLogger(logr.Discard())
	// An interrupt stops flush --wait following a flush; the flush itself goes on.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := runContext(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the plugin with args and returns the process exit code: 0 on success, 1 on an
// error (its message on errOut), or the code a command asked for (diff --exit-code).
func run(args []string, in io.Reader, out, errOut io.Writer) int {
	return runContext(context.Background(), args, in, out, errOut)
}

// runContext is run with a context that cancels what the command waits for.
func runContext(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	cmd := newRootCmd(out, errOut)
	cmd.SetIn(in)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
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
		Short: "Plan, inspect and flush SGLang HiCache deployments of hicache-operator",
		Long: `kubectl hicache shows what hicache-operator decides for a HiCacheDeployment: which rank
writes which pool to the L3 store, the layout fingerprint and L3 namespace, and what a change of
spec does to the objects already in the store. plan and diff read files and need no cluster.

status shows a running HiCacheDeployment: its conditions, serving groups and pods, per-rank duties,
layout, namespaces awaiting a flush and the health of its L3 store. flush removes objects from a
CacheBackend's store (one L3 namespace, everything, or one tenant) and follows the flush. Both talk
to the cluster of the kubeconfig, as kubectl does (--kubeconfig, --context, -n).`,
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
	root.AddCommand(newPlanCmd(), newDiffCmd(), newStatusCmd(), newFlushCmd())
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
