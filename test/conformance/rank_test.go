package conformance

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

const (
	// readyTimeout bounds a case from start to its ranks' reports: importing SGLang takes about
	// 14 s on an idle core and several times that with the cores shared.
	readyTimeout = 6 * time.Minute
	// answerTimeout bounds the answer to one command.
	answerTimeout = time.Minute
)

var (
	// startSlots bounds how many cases import SGLang and start their ranks at once (two cores).
	startSlots = make(chan struct{}, 2)
)

// sglangPython returns the interpreter of bin/sglang-venv after making sure it holds the pinned
// environment (hack/sglang-venv.sh runs once per test binary and is quick when up to date).
func sglangPython(t testing.TB) string {
	t.Helper()
	mooncaketest.RunScriptOnce(t, "sglang-venv.sh", 30*time.Minute)
	return filepath.Join(mooncaketest.Root(t), "bin", "sglang-venv", "bin", "python")
}

// caseInput is what hack/conformance/rank.py reads: the ranks to run with their rendered
// command lines, the tiny model's architecture, the pages to write and the ranks whose duties
// to report.
type caseInput struct {
	Ranks            []rankInput `json:"ranks"`
	Attention        string      `json:"attention"`
	Pools            []string    `json:"pools"`
	MambaConvBuffers int         `json:"mambaConvBuffers,omitempty"`
	Draft            *draftInput `json:"draft,omitempty"`
	Pages            [][]int     `json:"pages"`
	DutyRanks        [][2]int    `json:"dutyRanks"`
}

// rankInput is one rank to run: its TP and PP rank and its rendered command line.
type rankInput struct {
	TPRank int      `json:"tpRank"`
	PPRank int      `json:"ppRank"`
	Args   []string `json:"args"`
}

type draftInput struct {
	Pools    []string `json:"pools"`
	HostPool string   `json:"hostPool"`
}

// rankReport is the first line each rank prints.
type rankReport struct {
	Index           int                 `json:"index"`
	Ready           bool                `json:"ready"`
	PID             int                 `json:"pid"`
	TPRank          int                 `json:"tpRank"`
	PPRank          int                 `json:"ppRank"`
	PageHashes      []string            `json:"pageHashes"`
	CompletedTokens []int               `json:"completedTokens"`
	Duties          map[string]duty     `json:"duties"`
	Readback        map[string]readback `json:"readback"`
	Exists          map[string]int      `json:"exists"`
	Seconds         float64             `json:"seconds"`
}

// duty is SGLang's own decision for one rank: backup_skip and the pools it backs up.
type duty struct {
	BackupSkip bool     `json:"backupSkip"`
	Writes     []string `json:"writes"`
}

type readback struct {
	OK         []bool `json:"ok"`
	BytesEqual bool   `json:"bytesEqual"`
	Objects    int    `json:"objects"`
	Bytes      int    `json:"bytes"`
}

// caseProc is one running rank.py: the process that imported SGLang and the rank processes it
// forked.
type caseProc struct {
	cmd     *exec.Cmd
	stdin   *os.File
	lines   chan string
	done    chan struct{}
	waitErr error
	logPath string
	reports []rankReport
}

// startCase runs rank.py for the ranks of in with env as its whole MOONCAKE_* environment, and
// waits for every rank's report. The processes are killed when the test ends.
func startCase(t *testing.T, python string, in caseInput, env []string) *caseProc {
	t.Helper()
	root := mooncaketest.Root(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "case.json")
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(input, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &caseProc{lines: make(chan string, 64), done: make(chan struct{}), logPath: filepath.Join(dir, "ranks.log")}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(python, filepath.Join(root, "hack", "conformance", "rank.py"), input)
	p.cmd.Env = rankEnv(root, env)
	p.cmd.Stderr = logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdin, p.stdin = stdinR, stdinW
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Importing SGLang is the costly part: a few cases at a time.
	startSlots <- struct{}{}
	released := false
	release := func() {
		if !released {
			released = true
			<-startSlots
		}
	}
	defer release()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting rank.py: %v", err)
	}
	_ = stdinR.Close()
	t.Cleanup(func() {
		_ = p.stdin.Close() // rank.py stops the ranks at the end of its input
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		_ = logFile.Close()
		if t.Failed() {
			t.Logf("last lines of the ranks' log:\n%s", tail(p.logPath, 40))
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	p.reports = make([]rankReport, len(in.Ranks))
	for range in.Ranks {
		line, err := p.read(readyTimeout)
		if err != nil {
			t.Fatalf("%v; the ranks' log:\n%s", err, tail(p.logPath, 60))
		}
		var rep rankReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil || !rep.Ready || rep.Index < 0 || rep.Index >= len(in.Ranks) {
			t.Fatalf("rank.py printed %q, not a rank's report (%v); the ranks' log:\n%s", line, err, tail(p.logPath, 60))
		}
		p.reports[rep.Index] = rep
		t.Logf("rank tp%d pp%d (pid %d): ready %.0fs after the import began", rep.TPRank, rep.PPRank, rep.PID, rep.Seconds)
	}
	return p
}

// rankEnv is the environment of rank.py: this process's, without any MOONCAKE_* variable, plus
// the rendered ones and the venv's extension cache.
func rankEnv(root string, rendered []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MOONCAKE_") && !strings.HasPrefix(kv, "TORCH_EXTENSIONS_DIR=") {
			env = append(env, kv)
		}
	}
	env = append(env, rendered...)
	return append(env, "TORCH_EXTENSIONS_DIR="+filepath.Join(root, "bin", "sglang-venv", "torch-extensions"),
		"PYTHONUNBUFFERED=1", "GLOG_minloglevel=1")
}

func (p *caseProc) read(timeout time.Duration) (string, error) {
	select {
	case l := <-p.lines:
		return l, nil
	case <-p.done:
		select {
		case l := <-p.lines:
			return l, nil
		default:
		}
		return "", fmt.Errorf("rank.py exited (%v) before every rank answered", p.waitErr)
	case <-time.After(timeout):
		return "", errors.New("the ranks did not answer within " + timeout.String())
	}
}

// exists asks every rank what SGLang's own existence queries find of its pages.
func (p *caseProc) exists(t *testing.T) []map[string]int {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, "exists"); err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]int, len(p.reports))
	for range p.reports {
		line, err := p.read(answerTimeout)
		if err != nil {
			t.Fatalf("%v; the ranks' log:\n%s", err, tail(p.logPath, 40))
		}
		var ans struct {
			Index  int            `json:"index"`
			Exists map[string]int `json:"exists"`
		}
		if err := json.Unmarshal([]byte(line), &ans); err != nil || ans.Exists == nil || ans.Index < 0 || ans.Index >= len(out) {
			t.Fatalf("a rank answered %q to exists", line)
		}
		out[ans.Index] = ans.Exists
	}
	return out
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
