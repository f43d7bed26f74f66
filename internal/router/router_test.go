package router

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hicache-io/hicache-operator/internal/images"
)

func TestTheTableIsThePinnedRouter(t *testing.T) {
	s, err := Spec()
	if err != nil {
		t.Fatal(err)
	}
	req, err := os.ReadFile("../../hack/router/requirements.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^smg==(\S+)`).FindSubmatch(req)
	if m == nil {
		t.Fatal("hack/router/requirements.txt pins no smg==VERSION")
	}
	if s.Program() != "smg" || s.Version() != string(m[1]) {
		t.Fatalf("table of %s %s, but hack/router/requirements.txt pins smg %s: run hack/router-args.sh", s.Program(), s.Version(), m[1])
	}
	if images.RouterVersion != string(m[1]) {
		t.Fatalf("internal/images.RouterVersion is %s, but hack/router/requirements.txt pins smg %s: change both together", images.RouterVersion, m[1])
	}
	for _, flag := range []string{"--service-discovery", "--prefill-selector", "--decode-selector", "--pd-disaggregation", "--health-check-port", "--policy"} {
		if _, ok := s.Lookup(flag); !ok {
			t.Errorf("the pinned router has no %s", flag)
		}
	}
}

func TestArgs(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want []string
	}{
		"regular mode over the leaders": {
			cfg: Config{Namespace: "serving", WorkerPort: 30000, Selector: map[string]string{"hicache.io/deployment": "qwen3", "apps.kubernetes.io/pod-index": "0"},
				ControlPlaneKey: "$(ROUTER_KEY)"},
			want: []string{"--host", "0.0.0.0", "--port", "30000", "--health-check-port", "30001", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
				"--service-discovery", "--service-discovery-namespace", "serving", "--service-discovery-port", "30000",
				"--selector", "apps.kubernetes.io/pod-index=0", "hicache.io/deployment=qwen3", "--policy", "cache_aware",
				"--control-plane-api-keys", "operator:operator:admin:$(ROUTER_KEY)"},
		},
		"a key of the clients, presented to the workers": {
			cfg: Config{Namespace: "serving", WorkerPort: 30000, Selector: map[string]string{"hicache.io/deployment": "qwen3"},
				APIKey: "$(API_KEY)", ControlPlaneKey: "$(ROUTER_KEY)"},
			want: []string{"--host", "0.0.0.0", "--port", "30000", "--health-check-port", "30001", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
				"--service-discovery", "--service-discovery-namespace", "serving", "--service-discovery-port", "30000",
				"--selector", "hicache.io/deployment=qwen3", "--policy", "cache_aware",
				"--api-key", "$(API_KEY)", "--control-plane-api-keys", "operator:operator:admin:$(ROUTER_KEY)"},
		},
		"prefill/decode mode with a decode policy": {
			cfg: Config{Namespace: "serving", WorkerPort: 30000, Port: 8000, HealthPort: 8001, MetricsPort: 9090,
				PrefillSelector: map[string]string{"hicache.io/deployment": "dsv4", "hicache.io/role": "prefill", "apps.kubernetes.io/pod-index": "0"},
				DecodeSelector:  map[string]string{"hicache.io/deployment": "dsv4", "hicache.io/role": "decode", "apps.kubernetes.io/pod-index": "0"},
				DecodePolicy:    "power_of_two", ControlPlaneKey: "k"},
			want: []string{"--host", "0.0.0.0", "--port", "8000", "--health-check-port", "8001", "--prometheus-host", "0.0.0.0", "--prometheus-port", "9090",
				"--service-discovery", "--service-discovery-namespace", "serving", "--service-discovery-port", "30000", "--pd-disaggregation",
				"--prefill-selector", "apps.kubernetes.io/pod-index=0", "hicache.io/deployment=dsv4", "hicache.io/role=prefill",
				"--decode-selector", "apps.kubernetes.io/pod-index=0", "hicache.io/deployment=dsv4", "hicache.io/role=decode",
				"--policy", "cache_aware", "--decode-policy", "power_of_two", "--control-plane-api-keys", "operator:operator:admin:k"},
		},
		"prefill/decode mode with a policy per role": {
			cfg: Config{Namespace: "serving", WorkerPort: 30000,
				PrefillSelector: map[string]string{"hicache.io/deployment": "dsv4", "hicache.io/role": "prefill", "apps.kubernetes.io/pod-index": "0"},
				DecodeSelector:  map[string]string{"hicache.io/deployment": "dsv4", "hicache.io/role": "decode", "apps.kubernetes.io/pod-index": "0"},
				Policy:          "round_robin", PrefillPolicy: "bucket", DecodePolicy: "least_load", ControlPlaneKey: "k"},
			want: []string{"--host", "0.0.0.0", "--port", "30000", "--health-check-port", "30001", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
				"--service-discovery", "--service-discovery-namespace", "serving", "--service-discovery-port", "30000", "--pd-disaggregation",
				"--prefill-selector", "apps.kubernetes.io/pod-index=0", "hicache.io/deployment=dsv4", "hicache.io/role=prefill",
				"--decode-selector", "apps.kubernetes.io/pod-index=0", "hicache.io/deployment=dsv4", "hicache.io/role=decode",
				"--policy", "round_robin", "--prefill-policy", "bucket", "--decode-policy", "least_load", "--control-plane-api-keys", "operator:operator:admin:k"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Args(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestArgsRefuses(t *testing.T) {
	sel := map[string]string{"a": "b"}
	for name, tc := range map[string]struct {
		cfg   Config
		want  string
		noKey bool
	}{
		"no namespace":            {cfg: Config{WorkerPort: 1, Selector: sel}, want: "needs the namespace"},
		"no selector":             {cfg: Config{Namespace: "n", WorkerPort: 1}, want: "needs a Selector"},
		"both modes":              {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, PrefillSelector: sel, DecodeSelector: sel}, want: "not both"},
		"half a PD router":        {cfg: Config{Namespace: "n", WorkerPort: 1, PrefillSelector: sel}, want: "needs both PrefillSelector and DecodeSelector"},
		"a role policy alone":     {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, DecodePolicy: "random"}, want: "--decode-policy applies only"},
		"a prefill policy alone":  {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, PrefillPolicy: "bucket"}, want: "--prefill-policy applies only"},
		"one port twice":          {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, Port: 30001}, want: "ports must differ"},
		"an unknown policy":       {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, Policy: "psychic"}, want: `refused by smg 1.13.0: flag --policy does not accept "psychic"`},
		"bucket is prefill's":     {cfg: Config{Namespace: "n", WorkerPort: 1, PrefillSelector: sel, DecodeSelector: sel, DecodePolicy: "bucket"}, want: `--decode-policy does not accept "bucket"`},
		"a selector with a =":     {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: map[string]string{"a=b": "c"}}, want: "cannot be written as key=value"},
		"worker port too high":    {cfg: Config{Namespace: "n", WorkerPort: 70000, Selector: sel}, want: "WorkerPort 70000"},
		"no control-plane key":    {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, APIKey: "a"}, want: "needs a ControlPlaneKey", noKey: true},
		"the clients' key twice":  {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, APIKey: "a", ControlPlaneKey: "a"}, want: "must differ from its APIKey"},
		"a key with a colon":      {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, ControlPlaneKey: "a:b"}, want: "ControlPlaneKey cannot hold ':'"},
		"an API key with a space": {cfg: Config{Namespace: "n", WorkerPort: 1, Selector: sel, APIKey: "a b"}, want: "APIKey cannot hold"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.cfg.ControlPlaneKey == "" && !tc.noKey {
				tc.cfg.ControlPlaneKey = "k"
			}
			_, err := Args(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
