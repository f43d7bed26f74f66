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
	"strings"
	"sync"
)

// KeyEnv are the variables the proxy reads the keys from, to replace them wherever they appear
// in a redacted answer: the rank container's own (resolve.AdminAPIKeyEnv, resolve.APIKeyEnv).
var KeyEnv = []string{"HICACHE_ADMIN_API_KEY", "HICACHE_API_KEY"}

// Forward is one port the proxy serves: it listens on Listen and forwards to Upstream.
type Forward struct {
	Listen   string
	Upstream *url.URL
}

// ParseForward reads a --forward value, LISTEN=UPSTREAM, both host:port: "10.0.0.7:30000=127.0.0.1:30000".
func ParseForward(s string) (Forward, error) {
	listen, upstream, ok := strings.Cut(s, "=")
	if !ok {
		return Forward{}, fmt.Errorf("--forward %q: write it LISTEN=UPSTREAM, each host:port, e.g. 10.0.0.7:30000=127.0.0.1:30000", s)
	}
	for _, hp := range []string{listen, upstream} {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || port == "" || (hp == upstream && host == "") {
			return Forward{}, fmt.Errorf("--forward %q: %q is not a host:port", s, hp)
		}
	}
	return Forward{Listen: listen, Upstream: &url.URL{Scheme: "http", Host: upstream}}, nil
}

// Command is `manager guard`: flags, then the servers, until ctx ends (then it stops accepting,
// and waits for the requests in flight, streams included, until the process is killed).
func Command(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var forwards []Forward
	fs.Func("forward", "LISTEN=UPSTREAM (host:port each): serve LISTEN, forwarding to the SGLang server at UPSTREAM; repeat for more ports", func(s string) error {
		f, err := ParseForward(s)
		if err == nil {
			forwards = append(forwards, f)
		}
		return err
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: manager guard --forward LISTEN=UPSTREAM [--forward ...]")
		fmt.Fprintln(stderr, "A reverse proxy for SGLang's HTTP server that takes the keys out of its /server_info answers.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(forwards) == 0 || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("manager guard needs at least one --forward and takes no other arguments")
	}
	var known []string
	for _, name := range KeyEnv {
		known = append(known, getenv(name))
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
		listeners[i], servers[i] = l, Server(f.Listen, Proxy(f.Upstream, known))
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
	var err error
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
