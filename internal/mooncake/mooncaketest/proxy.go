package mooncaketest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// EtcdProxy relays TCP between masters and a real etcd on loopback, and can hold back what the
// masters send, as a slow etcd or a congested network would: the bytes are the masters' own,
// delivered in order, only later (Delay), or never, when the connections are cut (Cut). A test
// uses it to keep a leader's metadata log from reaching etcd for a moment: what the leader
// acknowledged in that moment is lost when it dies.
type EtcdProxy struct {
	// Endpoint is the proxy's address, 127.0.0.1:PORT: give it to the masters as their etcd.
	Endpoint string
	target   string
	ln       net.Listener

	mu    sync.Mutex
	delay time.Duration
	conns map[*relay]struct{}
}

// StartEtcdProxy relays to e on a free loopback port until the test ends.
func StartEtcdProxy(t testing.TB, e *Etcd) *EtcdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &EtcdProxy{Endpoint: ln.Addr().String(), target: e.Endpoint, ln: ln, conns: map[*relay]struct{}{}}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

// Etcd is the proxy as the etcd of StartHA: masters started with it reach etcd through the proxy.
func (p *EtcdProxy) Etcd() *Etcd { return &Etcd{Endpoint: p.Endpoint} }

// Delay holds every byte a client sends from now on for d before it reaches etcd (0: at once).
// What etcd answers passes at once. Keep d well under the masters' 5 s leader lease: their
// lease keep-alives are held too.
func (p *EtcdProxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Cut closes every connection at once and drops what it still held for etcd; clients that
// connect again are relayed without delay.
func (p *EtcdProxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*relay]struct{}{}
	p.mu.Unlock()
	for r := range conns {
		r.close()
	}
	// Only once every relay is closed: a chunk read in between would otherwise be relayed at
	// once, undelayed, before its relay is closed.
	p.Delay(0)
}

func (p *EtcdProxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

func (p *EtcdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		r := &relay{proxy: p, client: c, server: s, wake: make(chan struct{}, 1)}
		p.mu.Lock()
		p.conns[r] = struct{}{}
		p.mu.Unlock()
		go r.fromClient(p)
		go r.toServer()
		go func() {
			_, _ = io.Copy(c, s)
			r.close()
		}()
	}
}

// relay is one client connection and its connection to etcd, with the client's bytes queued.
type relay struct {
	proxy          *EtcdProxy
	client, server net.Conn
	mu             sync.Mutex
	queue          []chunk
	closed         bool
	wake           chan struct{}
	once           sync.Once
}

// chunk is what one read from the client returned, and when it may reach etcd.
type chunk struct {
	data []byte
	at   time.Time
}

func (r *relay) fromClient(p *EtcdProxy) {
	buf := make([]byte, 64<<10)
	var last time.Time
	for {
		n, err := r.client.Read(buf)
		if n > 0 {
			at := time.Now().Add(p.currentDelay())
			if at.Before(last) {
				at = last // in order, whatever the delay did meanwhile
			}
			last = at
			r.mu.Lock()
			r.queue = append(r.queue, chunk{data: append([]byte(nil), buf[:n]...), at: at})
			r.mu.Unlock()
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// The client went away: what it sent before still goes, then the connection.
				r.mu.Lock()
				r.queue = append(r.queue, chunk{at: last})
				r.mu.Unlock()
				select {
				case r.wake <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

func (r *relay) toServer() {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return
		}
		if len(r.queue) == 0 {
			r.mu.Unlock()
			<-r.wake
			continue
		}
		c := r.queue[0]
		r.mu.Unlock()
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return // cut: dropped
		}
		r.queue = r.queue[1:]
		r.mu.Unlock()
		if c.data == nil {
			r.close()
			return
		}
		if _, err := r.server.Write(c.data); err != nil {
			r.close()
			return
		}
	}
}

func (r *relay) close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed, r.queue = true, nil
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
		_ = r.client.Close()
		_ = r.server.Close()
		r.proxy.mu.Lock()
		delete(r.proxy.conns, r)
		r.proxy.mu.Unlock()
	})
}
