package guard

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/hicache-io/hicache-operator/internal/resolve"
)

// KeyEnv are the variables the proxy reads its key pairs from: each client key (the rank pod's
// user-facing keys, from spec.security or the generated admin key) and the server key SGLang
// holds for it (resolve.ServerKeySecret).
var KeyEnv = []struct{ Client, Server string }{
	{resolve.AdminAPIKeyEnv, resolve.ServerAdminKeyEnv},
	{resolve.APIKeyEnv, resolve.ServerAPIKeyEnv},
}

// KeyPairs are the proxy's key pairs from the variables of KeyEnv. A client key without its
// server key (or the reverse) is refused, as is a pair of equal keys: the server would then hold
// a key a client presents, and a key read from the server's log would open it. So is a key the
// proxy could not find in every spelling (the operator refuses such a key before any pod runs).
func KeyPairs(getenv func(string) string) ([]KeyPair, error) {
	var pairs []KeyPair
	for _, e := range KeyEnv {
		p := KeyPair{Client: getenv(e.Client), Server: getenv(e.Server)}
		switch {
		case p.Client == "" && p.Server == "":
			continue
		case p.Client == "" || p.Server == "":
			return nil, fmt.Errorf("$%s and $%s go together: a client key and the server key the proxy presents for it; set both or neither", e.Client, e.Server)
		case p.Client == p.Server:
			return nil, fmt.Errorf("$%s and $%s hold the same key: the server must not hold a key clients present, since SGLang logs its own keys", e.Client, e.Server)
		}
		for name, v := range map[string]string{e.Client: p.Client, e.Server: p.Server} {
			if prob := resolve.KeyProblem([]byte(v)); prob != "" {
				return nil, fmt.Errorf("$%s %s: %s", name, prob, resolve.KeyAdvice)
			}
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// Forward is one port the proxy serves: it listens on Listen and forwards to Upstream.
type Forward struct {
	Listen   string
	Upstream *url.URL
}

// Forwards are the ports the proxy serves: each port of ports on listenHost (the pod IP),
// forwarded to the same port on upstreamHost (loopback, where SGLang listens). The same port
// number on both sides keeps what SGLang reports of its own ports (its HTTP port, its PD
// bootstrap port) true for those who reach it through the proxy.
func Forwards(listenHost, upstreamHost string, ports []int) ([]Forward, error) {
	if listenHost == "" || upstreamHost == "" {
		return nil, errors.New("--listen-host and --upstream-host are both needed: the pod IP to serve on, and the address SGLang listens on")
	}
	if len(ports) == 0 {
		return nil, errors.New("at least one --port is needed: SGLang's HTTP port")
	}
	var out []Forward
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("--port %d: a port is between 1 and 65535", p)
		}
		if slices.ContainsFunc(out, func(f Forward) bool { return f.Upstream.Port() == strconv.Itoa(p) }) {
			return nil, fmt.Errorf("--port %d is given twice", p)
		}
		port := strconv.Itoa(p)
		out = append(out, Forward{
			Listen:   net.JoinHostPort(listenHost, port),
			Upstream: &url.URL{Scheme: "http", Host: net.JoinHostPort(upstreamHost, port)},
		})
	}
	return out, nil
}

// Command is `manager guard`: flags, then the servers, until ctx ends (then it stops accepting,
// and waits for the requests in flight, streams included, until the process is killed).
func Command(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listenHost := fs.String("listen-host", "", "Address to serve on: the pod IP (SGLang itself listens on --upstream-host)")
	upstreamHost := fs.String("upstream-host", "127.0.0.1", "Address SGLang listens on (its --host)")
	var ports []int
	fs.Func("port", "A port to serve on --listen-host, forwarded to the same port on --upstream-host; repeat for more (SGLang's HTTP port, a prefill server's bootstrap port)", func(s string) error {
		p, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not a port number", s)
		}
		ports = append(ports, p)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: manager guard --listen-host POD_IP [--upstream-host 127.0.0.1] --port PORT [--port ...]")
		fmt.Fprintln(stderr, "A reverse proxy for SGLang's HTTP server: it swaps the clients' keys for the server's, and takes every key out of the answers.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("manager guard takes no arguments but its flags (got %q)", fs.Args())
	}
	forwards, err := Forwards(*listenHost, *upstreamHost, ports)
	if err != nil {
		return err
	}
	pairs, err := KeyPairs(getenv)
	if err != nil {
		return err
	}
	servers := make([]*http.Server, len(forwards))
	listeners := make([]net.Listener, len(forwards))
	for i, f := range forwards {
		l, err := net.Listen("tcp", f.Listen)
		if err != nil {
			for _, l := range listeners[:i] {
				_ = l.Close()
			}
			return fmt.Errorf("listening on %s: %w", f.Listen, err)
		}
		listeners[i], servers[i] = l, Server(f.Listen, Proxy(f.Upstream, pairs))
		fmt.Fprintf(stderr, "guard: serving %s, forwarding to %s\n", l.Addr(), f.Upstream.Host)
	}
	errs := make(chan error, len(servers))
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := servers[i].Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	for _, s := range servers {
		_ = s.Shutdown(context.Background())
	}
	wg.Wait()
	return err
}
