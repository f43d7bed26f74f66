package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	stopGrace   = 10 * time.Second
	pollEvery   = 100 * time.Millisecond
	logTailSize = 25
)

// component is one subprocess of the cluster, in its own process group.
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd

	done    chan struct{}
	mu      sync.Mutex
	exitErr error
}

// startComponent runs path with args in a new process group, output appended to logFile.
// The process gets SIGKILL if this process dies without calling Stop (Pdeathsig; it fires
// when the starting OS thread ends, which the Go runtime only does for goroutines that
// lock their thread and exit, and nothing here does).
func startComponent(name, path string, args, env []string, logFile *os.File) (*component, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &component{name: name, logPath: logFile.Name(), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.exitErr = err
		c.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

func (c *component) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitError describes an unexpected exit with the end of the component's log.
func (c *component) exitError() error {
	c.mu.Lock()
	err := c.exitErr
	c.mu.Unlock()
	how := "exited"
	if err != nil {
		how = err.Error()
	}
	return fmt.Errorf("%s stopped unexpectedly (%s); the end of %s:\n%s", c.name, how, c.logPath, tailFile(c.logPath, logTailSize))
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace.
func (c *component) stop() error {
	if c.exited() {
		return nil
	}
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(stopGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-c.done:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("%s (pid %d) did not stop after SIGKILL", c.name, pgid)
	}
}

// waitHealthy polls https://127.0.0.1:port/healthz until it answers 200, trusting the
// self-signed certificate the component writes to certFile. It fails early, with the log
// tail, if the component exits.
func (c *component) waitHealthy(ctx context.Context, port int, certFile string) error {
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/healthz"
	var last error
	err := wait.PollUntilContextCancel(ctx, pollEvery, true, func(ctx context.Context) (bool, error) {
		if c.exited() {
			return false, c.exitError()
		}
		client, err := trustingClient(certFile)
		if err != nil {
			last = err
			return false, nil
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s answered %s", url, resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil && c.exited() {
		return c.exitError()
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%s did not become healthy at %s in time (last: %v); see %s", c.name, url, last, c.logPath)
	}
	return err
}

func trustingClient(certFile string) (*http.Client, error) {
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s yet", certFile)
	}
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true, // one probe per client: leave no idle connection behind
		},
	}, nil
}

// freePort asks the kernel for an unused TCP port on 127.0.0.1. Another process may take
// it before ours binds; callers retry with a new port when a bind fails.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portTaken tells whether a failed start was a lost race for a port.
func portTaken(logPath string) bool {
	return strings.Contains(tailFile(logPath, logTailSize), "address already in use")
}

// tailFile returns the last n lines of a file, or a note when it cannot be read.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// ProcessesUsing lists the ids of running processes whose command line mentions dir, such as
// the processes of a cluster whose Dir is dir. It reads /proc, so it works on Linux only.
func ProcessesUsing(dir string) ([]int, error) {
	if dir == "" {
		return nil, errors.New("ProcessesUsing needs a directory")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a zombie
		}
		if mentions(cmdline, dir) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// mentions tells whether a NUL-separated command line names dir or a path inside it.
func mentions(cmdline []byte, dir string) bool {
	dir = filepath.Clean(dir)
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		for i := strings.Index(arg, dir); i >= 0; {
			end := i + len(dir)
			if end == len(arg) || arg[end] == '/' || arg[end] == ',' || arg[end] == ' ' {
				return true
			}
			next := strings.Index(arg[end:], dir)
			if next < 0 {
				break
			}
			i = end + next
		}
	}
	return false
}
