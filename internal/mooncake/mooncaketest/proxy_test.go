package mooncaketest

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// sink accepts connections and sends every line it reads, with when it arrived, to lines.
func sink(t *testing.T) (string, <-chan time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	lines := make(chan time.Time, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					lines <- time.Now()
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
}

func TestEtcdProxyDelaysAndCuts(t *testing.T) {
	addr, lines := sink(t)
	p := StartEtcdProxy(t, &Etcd{Endpoint: addr})
	c, err := net.Dial("tcp", p.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	sent := time.Now()
	if _, err := c.Write([]byte("at once\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-lines:
		if d := got.Sub(sent); d > 500*time.Millisecond {
			t.Errorf("without a delay the line took %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the line never arrived")
	}

	p.Delay(300 * time.Millisecond)
	sent = time.Now()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-lines:
		if d := got.Sub(sent); d < 300*time.Millisecond {
			t.Errorf("a line held for 300ms arrived after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held line never arrived")
	}

	p.Delay(time.Second)
	if _, err := c.Write([]byte("dropped\n")); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	select {
	case <-lines:
		t.Error("a line held when the connection was cut reached the server")
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the cut connection still reads")
	}

	// A new connection after the cut passes at once.
	c2, err := net.Dial("tcp", p.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sent = time.Now()
	if _, err := c2.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-lines:
		if d := got.Sub(sent); d > 500*time.Millisecond {
			t.Errorf("after the cut a line took %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the line after the cut never arrived")
	}
}
