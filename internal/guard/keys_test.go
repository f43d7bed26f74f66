package guard

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

const (
	clientAdmin = "client-admin-0123456789abcdefghijklmnop"
	serverAdmin = "server-admin-0123456789abcdefghijklmnop"
	clientAPI   = "client-api-0123456789abcdefghijklmnopqrs"
	serverAPI   = "server-api-0123456789abcdefghijklmnopqrs"
)

var testPairs = []KeyPair{{Client: clientAdmin, Server: serverAdmin}, {Client: clientAPI, Server: serverAPI}}

// What the server receives for each Authorization a client sends: the server key of a client
// key read as SGLang reads a bearer token, and nothing for anything else.
func TestServerAuthorization(t *testing.T) {
	for name, tc := range map[string]struct {
		vs     []string
		want   string
		refuse bool
	}{
		"none":                         {vs: nil, want: ""},
		"the admin key":                {vs: []string{"Bearer " + clientAdmin}, want: "Bearer " + serverAdmin},
		"the API key":                  {vs: []string{"Bearer " + clientAPI}, want: "Bearer " + serverAPI},
		"the scheme in any ASCII case": {vs: []string{"bEaReR " + clientAPI}, want: "Bearer " + serverAPI},
		"the server's admin key":       {vs: []string{"Bearer " + serverAdmin}, want: ""},
		"the server's API key":         {vs: []string{"Bearer " + serverAPI}, want: ""},
		"an unknown token":             {vs: []string{"Bearer not-a-key"}, want: ""},
		"another scheme":               {vs: []string{"Basic " + clientAdmin}, want: ""},
		"no scheme":                    {vs: []string{clientAdmin}, want: ""},
		"two spaces":                   {vs: []string{"Bearer  " + clientAdmin}, want: ""},
		"a tab":                        {vs: []string{"Bearer\t" + clientAdmin}, want: ""},
		"a trailing space":             {vs: []string{"Bearer " + clientAdmin + " "}, want: ""},
		"a prefix of the key":          {vs: []string{"Bearer " + clientAdmin[:20]}, want: ""},
		"a Cyrillic a in the scheme":   {vs: []string{"Be\u0430rer " + clientAdmin}, want: ""},
		"two headers":                  {vs: []string{"Bearer " + clientAdmin, "Bearer " + clientAPI}, refuse: true},
		"an empty token":               {vs: []string{"Bearer "}, want: ""},
	} {
		got, ref := ServerAuthorization(tc.vs, testPairs)
		if tc.refuse != (ref != nil) || got != tc.want {
			t.Errorf("%s: %q %v, want %q (refused: %v)", name, got, ref, tc.want, tc.refuse)
		}
	}
	// Without key pairs nothing is passed on at all.
	if got, _ := ServerAuthorization([]string{"Bearer " + clientAdmin}, nil); got != "" {
		t.Errorf("no pairs: %q", got)
	}
	// The scheme's fold is ASCII only: Python's str.lower() maps no other character to one of
	// "bearer"'s letters, and neither may the proxy.
	for _, scheme := range []string{"Bearer", "BEARER", "bearer"} {
		if !asciiFold(scheme, "bearer") {
			t.Errorf("%q not read as bearer", scheme)
		}
	}
	for _, scheme := range []string{"Bearer\u017f", "Be\u0430rer", "Bearers", "Beare"} {
		if asciiFold(scheme, "bearer") {
			t.Errorf("%q read as bearer", scheme)
		}
	}
}

// Through the proxy, the server receives exactly the Authorization ServerAuthorization writes,
// and nothing of what the client sent otherwise; every key is taken out of the answer.
func TestProxySwapsTheKeys(t *testing.T) {
	url := throughPairs(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen := map[string]string{"": "none", "Bearer " + serverAdmin: "server-admin", "Bearer " + serverAPI: "server-api"}[r.Header.Get("Authorization")]
		if seen == "" {
			seen = "other"
		}
		fmt.Fprintf(w, "%d|%s|%s %s", len(r.Header.Values("Authorization")), seen, serverAdmin, clientAPI)
	}), testPairs)
	for _, tc := range []struct {
		send []string
		want string
		code int
	}{
		{nil, "0|none|", http.StatusOK},
		{[]string{"Bearer " + clientAdmin}, "1|server-admin|" + Redacted + " " + Redacted, http.StatusOK},
		{[]string{"bearer " + clientAPI}, "1|server-api|", http.StatusOK},
		{[]string{"Bearer " + serverAdmin}, "0|none|", http.StatusOK},
		{[]string{"Bearer junk"}, "0|none|", http.StatusOK},
		{[]string{"Bearer " + clientAdmin, "Bearer " + clientAdmin}, "", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/models", nil)
		for _, v := range tc.send {
			req.Header.Add("Authorization", v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		if resp.StatusCode != tc.code || !strings.HasPrefix(body, tc.want) {
			t.Errorf("sent %q: %d %q, want %d %q…", tc.send, resp.StatusCode, body, tc.code, tc.want)
		}
		for _, k := range []string{clientAdmin, serverAdmin, clientAPI, serverAPI} {
			if strings.Contains(body, k) {
				t.Errorf("sent %q: a key in the answer %q", tc.send, body)
			}
		}
	}
}
