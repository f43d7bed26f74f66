// Command sglang-standin stands in for SGLang's HTTP server where the real one cannot start (no
// GPU, no weights): run as `python3 -m sglang.launch_server ARGS` from the command line the
// operator renders, it checks ARGS against the pinned release's argument definitions as the
// release's parser would (exiting 2 on a refusal), then serves --host:--port with the release's
// key checks (auth.go) in front of a few of its endpoints, which answer without doing anything:
// /health, /health_generate, /v1/models, /generate, and the admin endpoints
// /hicache/storage-backend/clear, /hicache/storage-backend and /flush_cache.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

func main() {
	args := os.Args[1:]
	if len(args) < 2 || args[0] != "-m" || args[1] != "sglang.launch_server" {
		fmt.Fprintln(os.Stderr, "usage: python3 -m sglang.launch_server ARGS (the SGLang stand-in runs only the server)")
		os.Exit(2)
	}
	args = args[2:]
	spec, err := argspec.Default()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := spec.Validate(args); err != nil {
		fmt.Fprintf(os.Stderr, "launch_server: error: %v\n", err)
		os.Exit(2)
	}
	occ, err := spec.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "launch_server: error: %v\n", err)
		os.Exit(2)
	}
	values := map[string]string{"host": "127.0.0.1", "port": "30000"}
	for _, o := range occ {
		if len(o.Values) > 0 {
			values[o.Argument.Dest] = o.Values[len(o.Values)-1]
		}
	}
	apiKey, adminKey := values["api_key"], values["admin_api_key"]
	// What a person running the pod sees; never the keys themselves.
	fmt.Fprintf(os.Stderr, "sglang stand-in (sglang %s arguments): serving %s:%s, api key set: %v, admin key set: %v\n",
		spec.Version(), values["host"], values["port"], apiKey != "", adminKey != "")

	mux := http.NewServeMux()
	routes := map[string]authLevel{
		"GET /health": levelNormal, "GET /health_generate": levelNormal, "GET /v1/models": levelNormal, "POST /generate": levelNormal,
		"POST /hicache/storage-backend/clear": levelAdminOptional, "PUT /hicache/storage-backend": levelAdminOptional,
		"DELETE /hicache/storage-backend": levelAdminOptional, "GET /hicache/storage-backend": levelAdminOptional,
		"POST /flush_cache": levelAdminOptional,
	}
	for pattern, level := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if ok, status := decide(r.Method, r.URL.Path, r.Header.Get("Authorization"), apiKey, adminKey, level); !ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				msg := "Unauthorized"
				if status == http.StatusForbidden {
					msg = "Forbidden"
				}
				fmt.Fprintf(w, `{"error":%q}`, msg)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	srv := &http.Server{Addr: net.JoinHostPort(values["host"], values["port"]), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
