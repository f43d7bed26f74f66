package cacheflush

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/controller/reconcile"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/mooncake/flushjob"
)

// JobFlusher runs flush.py in a Kubernetes Job, in the backend's image, and reads its result from
// the container's termination message.
type JobFlusher struct {
	Client client.Client
}

// Method is MethodJob.
func (JobFlusher) Method(*hicachev1alpha1.CacheFlush) string { return hicachev1alpha1.MethodJob }

// JobName is the Job of one attempt of a flush: a DNS label of at most 63 characters, since the
// Job's name is also a label value of its pods.
func JobName(cf string, attempt int32) string {
	return storeuse.BoundedName(fmt.Sprintf("%s-%d", cf, attempt), 63)
}

// BuildFlushJob is the Job that runs flush.py once.
func BuildFlushJob(req storeuse.NamespaceFlushRequest) *batchv1.Job {
	cf := req.Flush
	labels := map[string]string{
		"app.kubernetes.io/name":       "mooncake-flush",
		"app.kubernetes.io/managed-by": storeuse.FieldOwner,
		hicachev1alpha1.LabelFlush:     storeuse.BoundedName(cf.Name, 63),
		hicachev1alpha1.LabelBackend:   req.Backend.Name,
	}
	podSec, sec := storeuse.RestrictedSecurity()
	// The flush pod goes where the backend's own pods go: it is one of them.
	nodeSelector, tolerations := storeuse.BackendPlacement(req.Backend)
	deadline := int64(req.Deadline / time.Second)
	if deadline <= 0 {
		deadline = int64(defaultFlushPolicy.AttemptTimeout / time.Second)
	}
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: JobName(cf.Name, req.Attempt), Namespace: cf.Namespace, Labels: labels,
			Annotations:     map[string]string{hicachev1alpha1.AnnotationAttempt: strconv.Itoa(int(req.Attempt))},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cf, hicachev1alpha1.GroupVersion.WithKind("CacheFlush"))},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)),
			// The attempt's deadline: the claim on the flush lapses only after it.
			ActiveDeadlineSeconds:   ptr.To(deadline),
			TTLSecondsAfterFinished: ptr.To(int32(3600)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:   corev1.RestartPolicyNever,
					SecurityContext: podSec,
					NodeSelector:    nodeSelector,
					Tolerations:     tolerations,
					Containers: []corev1.Container{{
						Name:  "flush",
						Image: req.Image,
						// The result line goes to the termination message, where the operator
						// reads it without access to logs.
						Command: []string{"sh", "-c", `python3 -c "$FLUSH_SCRIPT" > /dev/termination-log; rc=$?; cat /dev/termination-log; exit $rc`},
						Env: append([]corev1.EnvVar{
							{Name: "FLUSH_SCRIPT", Value: flushjob.Script},
							{Name: flushjob.EnvMaster, Value: storeuse.PodRPCAddress(req.Backend, req.Endpoints.RPCAddress)},
							// No admin URL: the operator counts what is left itself, and the
							// backend's NetworkPolicy admits only the operator to the admin port.
							{Name: flushjob.EnvMetadataServer, Value: req.Endpoints.MetadataServer},
							{Name: flushjob.EnvPrefix, Value: req.Prefix},
							{Name: flushjob.EnvForce, Value: strconv.FormatBool(req.Force)},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
							{Name: flushjob.EnvLocalHostname, Value: "$(POD_IP)"},
						}, storeuse.ClientClusterEnv(req.Endpoints.ClusterID)...),
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext:          sec,
					}},
				},
			},
		},
	}
	storeuse.AddEtcdProxyWithCA(&job.Spec.Template, req.Backend, req.EtcdImage, "")
	return job
}

// FlushNamespace creates the attempt's Job if needed and reports its outcome once it ends.
func (j JobFlusher) FlushNamespace(ctx context.Context, req storeuse.NamespaceFlushRequest) (flushjob.Result, bool, error) {
	desired := BuildFlushJob(req)
	var job batchv1.Job
	err := j.Client.Get(ctx, client.ObjectKeyFromObject(desired), &job)
	if apierrors.IsNotFound(err) {
		if _, err := (reconcile.Applier{Client: j.Client}).ApplyIfChanged(ctx, desired, nil); err != nil {
			return flushjob.Result{}, false, err
		}
		return flushjob.Result{}, false, nil
	}
	if err != nil {
		return flushjob.Result{}, false, err
	}
	finished, failed := false, false
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			finished, failed = true, c.Type == batchv1.JobFailed
		}
	}
	if !finished {
		return flushjob.Result{}, false, nil
	}
	var pods corev1.PodList
	if err := j.Client.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil {
		return flushjob.Result{}, false, err
	}
	msg := ""
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				msg = t.Message
			}
		}
	}
	res, perr := parseFlushOutput(msg)
	if failed || perr != nil {
		return res, true, fmt.Errorf("flush job %s failed: %s", job.Name, strings.TrimSpace(lastLine(msg, perr)))
	}
	return res, true, nil
}

func lastLine(msg string, err error) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		if err != nil {
			return err.Error()
		}
		return "no output"
	}
	lines := strings.Split(msg, "\n")
	return lines[len(lines)-1]
}

// parseFlushOutput reads the JSON result line of flush.py.
func parseFlushOutput(out string) (flushjob.Result, error) {
	var res flushjob.Result
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "{") {
			if err := json.Unmarshal([]byte(l), &res); err != nil {
				return res, fmt.Errorf("the flush script printed %q, not its JSON result: %w", l, err)
			}
			return res, nil
		}
	}
	return res, fmt.Errorf("the flush script printed no JSON result")
}

// LocalFlusher runs flush.py on the operator's own host with a given Python. It serves local
// clusters whose nodes are simulated (kwok runs no containers) and whose Mooncake master runs on
// the host; production uses JobFlusher.
type LocalFlusher struct {
	// Python has the Mooncake client installed.
	Python string
}

// Method is MethodLocal.
func (LocalFlusher) Method(*hicachev1alpha1.CacheFlush) string { return hicachev1alpha1.MethodLocal }

// FlushNamespace runs the script to completion, or until ctx is done: then the script's whole
// process group (it forks the Mooncake client into a child) is killed.
func (l LocalFlusher) FlushNamespace(ctx context.Context, req storeuse.NamespaceFlushRequest) (flushjob.Result, bool, error) {
	dir, err := os.MkdirTemp("", "hicache-flush-")
	if err != nil {
		return flushjob.Result{}, false, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "flush.py")
	if err := os.WriteFile(script, []byte(flushjob.Script), 0o600); err != nil {
		return flushjob.Result{}, false, err
	}
	args := []string{script, "--master", req.Endpoints.RPCAddress, "--prefix", req.Prefix, "--local-hostname", "127.0.0.1"}
	if req.Endpoints.AdminURL != "" {
		args = append(args, "--admin-url", req.Endpoints.AdminURL)
	}
	if !req.Force {
		args = append(args, "--no-force")
	}
	if req.Deadline > 0 {
		ctx2, cancel := context.WithTimeout(ctx, req.Deadline)
		defer cancel()
		ctx = ctx2
	}
	cmd := exec.CommandContext(ctx, l.Python, args...)
	if id := req.Endpoints.ClusterID; id != "" {
		cmd.Env = append(os.Environ(), storeuse.EnvClusterID+"="+id)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The script leads its own group (Setpgid): -pid is the group, its forked child too.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return flushjob.Result{}, true, fmt.Errorf("flush script stopped: %w", ctx.Err())
	}
	res, perr := parseFlushOutput(stdout.String())
	if runErr != nil {
		return res, true, fmt.Errorf("flush script: %v: %s", runErr, strings.TrimSpace(lastLine(stderr.String(), nil)))
	}
	if perr != nil {
		return res, true, perr
	}
	return res, true, nil
}
