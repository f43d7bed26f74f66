package mooncaketest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func groupAlive(pid int) bool {
	return !errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
}

func TestMasterLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real mooncake_master")
	}
	m := Start(t)
	code, body, err := get(t, m.AdminURL+"/health")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"service_ready":true`) {
		t.Fatalf("GET /health = %d %q, %v; want 200 with service_ready true", code, body, err)
	}

	keys := []string{"lifecycle-a", "lifecycle-b", "lifecycle-c"}
	m.PutKeys(t, keys, 512)
	_, listed, err := get(t, m.AdminURL+"/get_all_keys")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.Contains(listed, k+"\n") {
			t.Errorf("/get_all_keys = %q, missing %q", listed, k)
		}
	}

	pid := m.proc.cmd.Process.Pid
	m.Stop()
	if groupAlive(pid) {
		t.Fatalf("process group %d still alive after Stop", pid)
	}
	if _, _, err := get(t, m.AdminURL+"/health"); err == nil {
		t.Fatal("GET /health succeeded after Stop")
	}

	m.Restart()
	code, body, err = get(t, m.AdminURL+"/health")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /health after Restart = %d %q, %v", code, body, err)
	}
	if m.proc.cmd.Process.Pid == pid {
		t.Fatal("Restart reused the old process")
	}
}

func TestCleanupLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real mooncake_master")
	}
	var masterPID, storePID int
	t.Run("inner", func(t *testing.T) {
		m := Start(t)
		m.PutKeys(t, []string{"cleanup-a"}, 128)
		masterPID = m.proc.cmd.Process.Pid
		storePID = m.stores[0].cmd.Process.Pid
		for _, pid := range []int{masterPID, storePID} {
			if !groupAlive(pid) {
				t.Fatalf("process group %d is not running during the test", pid)
			}
		}
	})
	for _, pid := range []int{masterPID, storePID} {
		if groupAlive(pid) {
			t.Errorf("process group %d still alive after the test's cleanup", pid)
		}
	}
}

func TestMasterVersion(t *testing.T) {
	v, commit := MasterVersion(t)
	if v == "" || len(commit) < 7 {
		t.Fatalf("MasterVersion() = %q, %q", v, commit)
	}
}

// A master that Start returns accepts RPC connections at once, so a test may freeze it right
// away and see clients hang rather than be refused. /health reports service_ready a moment
// before the RPC port listens (seen about once in 20 starts on a loaded machine).
func TestStartReturnsAListeningMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real mooncake_master processes")
	}
	for i := 0; i < 8; i++ {
		m := Start(t)
		c, err := net.DialTimeout("tcp", m.RPCAddr, time.Second)
		if err != nil {
			t.Fatalf("start %d: the RPC port %s refused a connection right after Start: %v", i, m.RPCAddr, err)
		}
		_ = c.Close()
		m.Stop()
	}
}
