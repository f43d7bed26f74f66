// Command coredns is CoreDNS with only the plugins the local cluster's DNS needs: the
// upstream main with a trimmed plugin list. CoreDNS compiles its plugins in (core/plugin
// imports all of them and core/dnsserver lists their order); this main imports the few it
// needs and sets the same order for them, so that every other plugin and its dependencies
// stay out of the binary.
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives are the imported plugins in the execution order of CoreDNS's own list
// (core/dnsserver/zdirectives.go).
var directives = []string{"reload", "ready", "health", "errors", "cache", "kubernetes", "loop", "forward"}

func main() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		fmt.Fprintln(os.Stderr, "coredns:", err)
		os.Exit(1)
	}
	coremain.Run()
}
