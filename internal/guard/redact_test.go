package guard

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

func TestRedacts(t *testing.T) {
	cases := map[string]struct {
		path string
		want bool
	}{
		"server_info":                {"/server_info", true},
		"the deprecated name":        {"/get_server_info", true},
		"a trailing slash":           {"/server_info/", true},
		"repeated slashes":           {"//server_info", true},
		"a dot segment":              {"/v1/../server_info", true},
		"no leading slash":           {"server_info", true},
		"below a root path":          {"/api/server_info", true},
		"the old name, a slash":      {"/get_server_info/", true},
		"another name ending so":     {"/my_server_info", false},
		"model_info holds no secret": {"/model_info", false},
		"generate":                   {"/generate", false},
		"health":                     {"/health", false},
		"a longer path":              {"/server_info_x", false},
		"below it":                   {"/server_info/x", false},
		"case matters to the server": {"/Server_Info", false},
		"the root":                   {"/", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Redacts(tc.path); got != tc.want {
				t.Errorf("Redacts(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

func TestRedactCommandLine(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"the operator's flags": {
			"--model-path m --host 0.0.0.0 --admin-api-key K1 --api-key K2 --tp-size 8",
			"--model-path m --host 0.0.0.0 --admin-api-key <redacted> --api-key <redacted> --tp-size 8",
		},
		"flag=value":               {"--api-key=K2 --tp-size=8", "--api-key=<redacted> --tp-size=8"},
		"an abbreviation":          {"--admin-api K1 --port 30000", "--admin-api <redacted> --port 30000"},
		"an abbreviation=value":    {"--adm=K1", "--adm=<redacted>"},
		"the TLS key password":     {"--ssl-keyfile-password pw --ssl-keyfile /k", "--ssl-keyfile-password <redacted> --ssl-keyfile /k"},
		"a flag last, no value":    {"--model-path m --api-key", "--model-path m --api-key"},
		"a value like a flag name": {"--served-model-name --api-key", "--served-model-name --api-key"},
		"other flags untouched":    {"--attention-backend fa3 --api-base x", "--attention-backend fa3 --api-base x"},
		"the end of options":       {"-- --api-key", "-- --api-key"},
		"empty":                    {"", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := RedactCommandLine(tc.in); got != tc.want {
				t.Errorf("RedactCommandLine(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactBody(t *testing.T) {
	const admin, api = "ADMIN-KEY-abc", "API-KEY-xyz"
	known := []string{admin, api, ""}
	cases := map[string]struct {
		in, want string
		known    []string
		refused  bool
	}{
		"the keys at the top level": {
			in:   `{"api_key":"` + api + `","admin_api_key":"` + admin + `","model_path":"m","tp_size":8}`,
			want: `{"admin_api_key":"<redacted>","api_key":"<redacted>","model_path":"m","tp_size":8}`,
		},
		"an unset key stays null": {
			in:   `{"api_key":null,"admin_api_key":"` + admin + `"}`,
			want: `{"admin_api_key":"<redacted>","api_key":null}`,
		},
		"a key the proxy was not given is redacted by its field": {
			in:   `{"admin_api_key":"other","ssl_keyfile_password":"pw","ssl_keyfile":"/k"}`,
			want: `{"admin_api_key":"<redacted>","ssl_keyfile":"/k","ssl_keyfile_password":"<redacted>"}`,
		},
		"every scheduler's copy under internal_states": {
			in:   `{"internal_states":[{"admin_api_key":"` + admin + `","dp_rank":0},{"admin_api_key":"x","dp_rank":1}]}`,
			want: `{"internal_states":[{"admin_api_key":"<redacted>","dp_rank":0},{"admin_api_key":"<redacted>","dp_rank":1}]}`,
		},
		"launch_command, even with a key the proxy was not given": {
			in:   `{"launch_command":"--model-path m --admin-api-key other --api-key=` + api + `"}`,
			want: `{"launch_command":"--model-path m --admin-api-key <redacted> --api-key=<redacted>"}`,
		},
		"a known key anywhere else": {
			in:   `{"env_vars":{"X":"pre-` + admin + `-post"},"note":["` + api + `"]}`,
			want: `{"env_vars":{"X":"pre-<redacted>-post"},"note":["<redacted>"]}`,
		},
		"numbers keep their digits": {
			in:   `{"max_total_tokens":123456789012345678,"mem_fraction_static":0.8812345678901234}`,
			want: `{"max_total_tokens":123456789012345678,"mem_fraction_static":0.8812345678901234}`,
		},
		"no HTML escaping": {
			in:   `{"chat_template":"<s>a & b</s>"}`,
			want: `{"chat_template":"<s>a & b</s>"}`,
		},
		"a refusal passes": {
			in:   `{"error":"Unauthorized"}`,
			want: `{"error":"Unauthorized"}`,
		},
		"a known key as a member name": {
			in:   `{"` + admin + `":1}`,
			want: `{"<redacted>":1}`,
		},
		"not JSON is refused": {
			in:      `Internal Server Error: ` + admin,
			refused: true,
		},
		"two JSON values are not one answer: refused": {
			in:      `{"a":1} {"ssl_keyfile_password":"pw"}`,
			refused: true,
		},
		"trailing bytes after one value: refused": {
			in:      `{"a":1} x`,
			refused: true,
		},
		"empty": {in: ``, want: ``},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k := known
			if tc.known != nil {
				k = tc.known
			}
			out, ok := RedactBody([]byte(tc.in), k)
			got := string(out)
			if ok == tc.refused {
				t.Fatalf("RedactBody(%s): ok %v, want %v", tc.in, ok, !tc.refused)
			}
			if got != tc.want {
				t.Errorf("RedactBody(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
			if strings.Contains(got, admin) || strings.Contains(got, api) {
				t.Errorf("a key is left in %s", got)
			}
		})
	}
}

// An answer as SGLang 0.5.23 builds it (resolved_dict, launch_command, internal_states) keeps
// every field but the secrets.
func TestRedactBodyKeepsTheRest(t *testing.T) {
	in := map[string]any{
		"model_path": "deepseek-ai/DeepSeek-V4", "served_model_name": "dsv4", "tp_size": json.Number("16"),
		"dp_size": json.Number("1"), "disaggregation_mode": "prefill", "version": "0.5.23",
		"load_balance_method": "round_robin", "api_key": "k1", "admin_api_key": "k2",
		"launch_command":  "--model-path deepseek-ai/DeepSeek-V4 --admin-api-key k2",
		"internal_states": []any{map[string]any{"api_key": "k1", "last_gen_throughput": json.Number("1.5")}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	out, ok := RedactBody(b, []string{"k1", "k2"})
	if !ok {
		t.Fatal("an answer as SGLang builds it is refused")
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"model_path": "deepseek-ai/DeepSeek-V4", "served_model_name": "dsv4", "tp_size": json.Number("16"),
		"dp_size": json.Number("1"), "disaggregation_mode": "prefill", "version": "0.5.23",
		"load_balance_method": "round_robin", "api_key": Redacted, "admin_api_key": Redacted,
		"launch_command":  "--model-path deepseek-ai/DeepSeek-V4 --admin-api-key <redacted>",
		"internal_states": []any{map[string]any{"api_key": Redacted, "last_gen_throughput": json.Number("1.5")}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("redacted answer (-want +got):\n%s", d)
	}
}

// The secret fields and flags are the pinned release's: each flag is an argument whose field is
// redacted, and every argument whose name says it holds a key, a secret, a password, a
// credential or an authentication value is either redacted or named here as no secret. A new
// release's argument of that kind fails this test until it is classified.
func TestSecretsAreThePinnedReleases(t *testing.T) {
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range SecretFlags {
		a, ok := spec.Lookup(f)
		if !ok || !slices.Contains(SecretFields, a.Dest) {
			t.Errorf("%s: not an argument of sglang %s whose field is redacted (%+v)", f, spec.Version(), a)
		}
	}
	notSecret := map[string]string{"ssl_keyfile": "the path of the TLS key file, not the key"}
	looksSecret := regexp.MustCompile(`key|secret|passw|credential|auth`)
	for _, a := range spec.Arguments() {
		if !looksSecret.MatchString(a.Dest) {
			continue
		}
		if _, ok := notSecret[a.Dest]; ok {
			continue
		}
		if !slices.Contains(SecretFields, a.Dest) {
			t.Errorf("sglang %s argument %s (%s) looks like a secret and is not redacted: add it to SecretFields and SecretFlags, or say why it is none", spec.Version(), a.Dest, a.Flags)
		}
		if !slices.ContainsFunc(a.Flags, func(f string) bool { return slices.Contains(SecretFlags, f) }) {
			t.Errorf("the flags of %s (%v) are not among SecretFlags", a.Dest, a.Flags)
		}
	}
}
