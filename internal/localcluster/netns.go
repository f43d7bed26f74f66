package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces live, as iproute2 and containerd name them.
const netnsDir = "/run/netns"

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// createNetns makes a new, empty network namespace and pins it at /run/netns/<name> with a
// bind mount (what `ip netns add` does, without also turning /run/netns into a mount point).
func createNetns(name string) error {
	if err := os.MkdirAll(netnsDir, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", netnsDir, err)
	}
	path := netnsPath(name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("create the network namespace file %s: %w", path, err)
	}
	_ = f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread's network namespace changes for good: it stays locked, and the runtime
		// ends the thread when this goroutine returns. It starts no process, so no child's
		// Pdeathsig is tied to it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare a network namespace: %w", err)
			return
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("pin the network namespace at %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// deleteNetns unpins the namespace; the kernel frees it (and the veth pair with it) once no
// process runs in it. A missing namespace is not an error.
func deleteNetns(name string) error {
	path := netnsPath(name)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount the network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// inNetns runs fn on an OS thread switched into the named network namespace. Sockets fn
// creates belong to that namespace for their whole life, whichever thread uses them later.
func inNetns(name string, fn func() error) error {
	target, err := os.Open(netnsPath(name))
	if err != nil {
		return fmt.Errorf("open the network namespace %s: %w", name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter the network namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: the runtime ends it with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("return from the network namespace %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// nsenterCmd is the command line that runs argv in the named network namespace only: the
// mount namespace stays the host's, so the process sees /sys/fs/cgroup (`ip netns exec`
// remounts /sys and hides it).
func nsenterCmd(netns string, argv ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath(netns), "--"}, argv...)
}

// run runs a short command and returns its error with its output.
func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// proxy accepts connections on a listener (in the node's network namespace) and forwards
// each to target (the API server on the host's loopback).
type proxy struct {
	listener net.Listener
	target   string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
}

func startProxy(l net.Listener, target string) *proxy {
	p := &proxy{listener: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p
}

func (p *proxy) serve() {
	for {
		in, err := p.listener.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.wg.Go(func() {
			defer p.untrack(in)
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			if !p.track(out) {
				return
			}
			defer p.untrack(out)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
		})
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// close stops accepting, closes every open connection and waits for the forwarding to end.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.listener.Close()
	p.wg.Wait()
}
