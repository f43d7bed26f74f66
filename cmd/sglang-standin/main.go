// Command sglang-standin stands in for SGLang's HTTP server where the real one cannot start (no
// GPU, no weights): run as `python3 -m sglang.launch_server ARGS` from the command line the
// operator renders, it checks ARGS against the pinned release's argument definitions as the
// release's parser would (exiting 2 on a refusal), then serves --host:--port with the release's
// key checks (auth.go) in front of a few of its endpoints, which answer without doing anything:
// /health, /health_generate, /generate, the admin endpoints /hicache/storage-backend/clear,
// /hicache/storage-backend and /flush_cache, and, with what the command line tells (info.go),
// /server_info, /model_info and /v1/models, which a router reads to register the server.
package main

import (
	"encoding/json"
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
	// What a person running the pod sees first.
	fmt.Fprintf(os.Stderr, "sglang stand-in (sglang %s arguments): serving %s:%s, api key set: %v, admin key set: %v\n",
		spec.Version(), values["host"], values["port"], apiKey != "", adminKey != "")

	info := serverArgs(spec, occ)
	// As the release does at start (engine.py: logger.info(f"server_args={...}")): every
	// argument, the keys in clear. This is why SGLang holds only the server keys.
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().UTC().Format("2006-01-02 15:04:05"), serverArgsLogLine(info))
	started := time.Now().Unix()
	mux := http.NewServeMux()
	// The answers of the endpoints that report something: what the router reads when it
	// registers a server. The others answer "ok".
	bodies := map[string]func() any{
		"GET /server_info":     func() any { return serverInfo(info, args, spec.Version()) },
		"GET /get_server_info": func() any { return serverInfo(info, args, spec.Version()) },
		"GET /model_info":      func() any { return modelInfo(info) },
		"GET /get_model_info":  func() any { return modelInfo(info) },
		"GET /v1/models":       func() any { return models(info, started) },
	}
	routes := map[string]authLevel{
		"GET /health": levelNormal, "GET /health_generate": levelNormal, "GET /v1/models": levelNormal, "POST /generate": levelNormal,
		"GET /server_info": levelNormal, "GET /get_server_info": levelNormal, "GET /model_info": levelNormal, "GET /get_model_info": levelNormal,
		"POST /hicache/storage-backend/clear": levelAdminOptional, "PUT /hicache/storage-backend": levelAdminOptional,
		"DELETE /hicache/storage-backend": levelAdminOptional, "GET /hicache/storage-backend": levelAdminOptional,
		"POST /flush_cache": levelAdminOptional,
	}
	for pattern, level := range routes {
		body := bodies[pattern]
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
			if body == nil {
				fmt.Fprintln(w, "ok")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(w).Encode(body()); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
	}
	srv := &http.Server{Addr: net.JoinHostPort(values["host"], values["port"]), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
