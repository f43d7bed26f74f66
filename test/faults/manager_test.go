package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
	"github.com/hicache-io/hicache-operator/internal/testutil"
)

// leaseName is cmd/manager's LeaderElectionID.
const leaseName = "hicache-operator.hicache.io"

// manager is one operator process, run as the chart runs it (leader election on, the shipped
// defaults, the generated RBAC and nothing more) with what a host without container nodes needs:
// flushes run by this host's Mooncake client. It talks to the API server as a user of its own,
// so that the audit log tells its requests from the tests' and from another manager's. The managers of a test elect their leader
// in the test's namespace, so that no test waits for the lease of another's.
type manager struct {
	t *testing.T
	// user is its API user and its flush-claim identity.
	user string
	// ns holds its leader-election lease.
	ns         string
	kubeconfig string
	logPath    string
	args       []string

	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	// starts counts the processes run; each writes its log after the last one's.
	starts  int
	started time.Time
	// startMark is the audit log's length when the current process started.
	startMark int64
}

// startManager runs a manager named user (unique in the suite) until the test ends, with its
// leader-election lease in namespace ns.
func startManager(t *testing.T, ns, user string) *manager {
	t.Helper()
	grantManagerRBAC(t, ns, user)
	kc, err := cluster.UserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &manager{t: t, user: user, ns: ns, kubeconfig: filepath.Join(dir, "kubeconfig"), logPath: filepath.Join(dir, "manager.log")}
	if err := os.WriteFile(m.kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	m.args = []string{
		"--kubeconfig=" + m.kubeconfig,
		"--leader-elect", "--leader-election-namespace=" + ns,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(freePort(t)),
		"--metrics-bind-address=0",
		"--identity=" + user,
		"--flush-runner=local",
		"--flush-python=" + mooncaketest.Python(t),
	}
	t.Cleanup(func() {
		m.end()
		if t.Failed() {
			t.Logf("the end of manager %s's log:\n%s", m.user, tail(m.logPath, 40))
		}
	})
	m.start()
	return m
}

// start runs a new process of the manager; its log is appended to the earlier ones'.
func (m *manager) start() {
	m.t.Helper()
	if m.running() {
		m.t.Fatalf("manager %s is already running", m.user)
	}
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	m.starts++
	m.startMark = auditMark(m.t)
	fmt.Fprintf(f, "=== process %d of %s\n", m.starts, m.user)
	cmd := exec.Command(managerBin, m.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a signal to the test does not reach it, and its end does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		m.t.Fatalf("starting manager %s: %v", m.user, err)
	}
	m.cmd, m.done, m.exitErr, m.started = cmd, make(chan struct{}), nil, time.Now()
	done := m.done
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		m.exitErr = err
		close(done)
	}()
}

func (m *manager) running() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// kill ends the process with SIGKILL, as the OOM killer or a node's loss would: no lease is
// released, nothing is finished.
func (m *manager) kill() {
	if !m.running() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// end stops a running process at the end of a test: SIGTERM, and SIGKILL after 15 s.
func (m *manager) end() {
	if !m.running() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(15 * time.Second):
		m.kill()
	}
}

// stop ends the process with SIGTERM, as the kubelet stops a pod, and requires a clean exit
// within 30 s (which releases the lease).
func (m *manager) stop() {
	m.t.Helper()
	if !m.running() {
		m.t.Fatalf("manager %s is not running", m.user)
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		if m.exitErr != nil {
			m.t.Fatalf("manager %s exited with %v on SIGTERM, want 0", m.user, m.exitErr)
		}
	case <-time.After(30 * time.Second):
		m.t.Fatalf("manager %s did not stop within 30 s of SIGTERM", m.user)
	}
}

// exited tells whether the process ended by itself, and how.
func (m *manager) exited() (bool, error) {
	if m.done == nil {
		return false, nil
	}
	select {
	case <-m.done:
		return true, m.exitErr
	default:
		return false, nil
	}
}

// leads tells whether the current process took the lease.
func (m *manager) leads() bool {
	_, ok := m.ledAt()
	return ok
}

// ledAt is when the current process took the lease: the audit log's first successful create or
// update of the lease by its user since the process started (a killed process writes nothing
// more, and a standby only reads the lease until it takes it).
func (m *manager) ledAt() (time.Time, bool) {
	for _, e := range byUsers(auditSince(m.t, m.startMark, m.ns), m.user) {
		if e.ObjectRef != nil && e.ObjectRef.Resource == "leases" && e.ObjectRef.Name == leaseName &&
			(e.Verb == "create" || e.Verb == "update") && e.code() < 300 {
			return e.StageTimestamp.Time, true
		}
	}
	return time.Time{}, false
}

// waitLeading waits until the current process leads, and returns how long after its start it
// took the lease.
func (m *manager) waitLeading(timeout time.Duration) time.Duration {
	m.t.Helper()
	testutil.Eventually(m.t, timeout, "manager "+m.user+" leading", func() (bool, string) {
		if done, err := m.exited(); done {
			m.t.Fatalf("manager %s exited (%v) before it led; the end of its log:\n%s", m.user, err, tail(m.logPath, 30))
		}
		return m.leads(), "no write of the lease by " + m.user
	})
	at, _ := m.ledAt()
	return at.Sub(m.started)
}

// leaseHolder is the holder identity of the lease in ns ("" when none holds it).
func leaseHolder(ctx context.Context, ns string) (string, error) {
	var l coordinationv1.Lease
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, &l); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// grantManagerRBAC grants user what the chart grants the operator's ServiceAccount: the
// generated ClusterRole (config/rbac/role.yaml) cluster-wide, and the leader-election Role
// (config/rbac/leader_election_role.yaml) in ns, where the lease is.
func grantManagerRBAC(t *testing.T, ns, user string) {
	t.Helper()
	ctx := context.Background()
	var clusterRole rbacv1.ClusterRole
	readManifest(t, "role.yaml", &clusterRole)
	if err := k8s.Create(ctx, &clusterRole); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	readManifest(t, "leader_election_role.yaml", &role)
	role.Namespace = ns
	if err := k8s.Create(ctx, &role); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "faults-" + user}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}}
	if err := k8s.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "faults-" + user}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	if err := k8s.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
}

// readManifest decodes config/rbac/<name> strictly into obj.
func readManifest(t *testing.T, name string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "config", "rbac", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("config/rbac/%s: %v", name, err)
	}
}
