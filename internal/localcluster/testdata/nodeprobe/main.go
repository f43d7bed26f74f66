// Command nodeprobe is the program of the real node's test image: it serves HTTP or checks
// from inside a pod what a pod relies on.
//
//	nodeprobe                 serve "hello from <hostname>" on :8080
//	nodeprobe resolve NAME    print the addresses NAME resolves to
//	nodeprobe get URL         print the body of an HTTP GET of URL
//	nodeprobe api             GET /api of kubernetes.default with the pod's ServiceAccount token
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nodeprobe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	mode := ""
	if len(args) > 0 {
		mode = args[0]
	}
	switch mode {
	case "":
		host, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello from", host) })
		srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second}
		return srv.ListenAndServe()
	case "resolve":
		addrs, err := net.LookupHost(args[1])
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(addrs, " "))
		return nil
	case "get":
		return get(http.DefaultClient, args[1], "")
	case "api":
		ca, err := os.ReadFile(saDir + "/ca.crt")
		if err != nil {
			return err
		}
		token, err := os.ReadFile(saDir + "/token")
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		return get(client, "https://kubernetes.default.svc/api", strings.TrimSpace(string(token)))
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func get(client *http.Client, url, token string) error {
	client.Timeout = 10 * time.Second
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
