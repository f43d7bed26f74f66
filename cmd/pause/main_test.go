package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// children lists the processes whose parent is pid, with their state (R, S, Z...).
func children(pid int) map[int]string {
	out := map[int]string{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out[p] = f[0]
		}
	}
	return out
}

// As PID 1 of a pod's PID namespace, pause inherits every orphan in it and must reap them, or
// the pod fills with zombies. Five orphans exit at once: their SIGCHLDs coalesce.
func TestReapsOrphansAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a PID namespace (CI runs as root)")
	}
	cmd := exec.Command(buildPause(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	orphans := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-p", "--", "sh", "-c", "for i in 1 2 3 4 5; do sleep 2 </dev/null >/dev/null 2>&1 & done; exit 0")
	if out, err := orphans.CombinedOutput(); err != nil {
		t.Fatalf("starting orphans in pause's PID namespace: %v\n%s", err, out)
	}
	if n := len(children(pid)); n != 5 {
		t.Fatalf("pause has %d children right after the orphans' parent exited, want the 5 orphans: %v", n, children(pid))
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(children(pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pause's children 3s after they exited: %v (Z: not reaped)", children(pid))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestExitsOnTermAndInt(t *testing.T) {
	bin := buildPause(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("pause exited with no signal: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		_ = cmd.Process.Signal(sig)
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) || err != nil {
				t.Errorf("after %v: %v, want exit status 0", sig, err)
			}
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("pause still runs 5s after %v", sig)
		}
	}
}
