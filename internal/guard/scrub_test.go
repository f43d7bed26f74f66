package guard

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCheckRequest(t *testing.T) {
	for target, want := range map[string]string{
		"/":                                      "",
		"/server_info":                           "",
		"/v1/models/deepseek-ai/DeepSeek-V4":     "",
		"/route?engine_rank=0&target_dp_group=1": "",
		"/generate?q=a%20b":                      "",
		"/server_info%0A":                        "byte 0x25",
		"/get_server_info%0a":                    "byte 0x25",
		"/server_info\n":                         "byte 0x0a",
		"/server_info%2F":                        "byte 0x25",
		"/server_info\\":                         "byte 0x5c",
		"/ser%76er_info":                         "byte 0x25",
		"//server_info":                          "an empty segment",
		"/server_info/":                          "an empty segment",
		"/./server_info":                         "a dot segment",
		"/v1/../server_info":                     "a dot segment",
		"/server_info ":                          "byte 0x20",
		"/server_info#x":                         "byte 0x23",
		"/server_info?x=%0a":                     "the control character",
		"/server_info?x=%zz":                     "does not start a percent-encoding",
		"/server_info?x=\x01":                    "not a query character",
		"http://127.0.0.1/server_info":           "origin form",
		"*":                                      "origin form",
	} {
		r := CheckRequest(http.MethodGet, target, http.Header{})
		switch {
		case want == "" && r != nil:
			t.Errorf("%q refused: %s", target, r.Message)
		case want != "" && (r == nil || r.Status != http.StatusBadRequest || !strings.Contains(r.Message, want)):
			t.Errorf("%q: %+v, want a 400 saying %q", target, r, want)
		}
	}
	for _, m := range []string{"TRACE", "CONNECT", "PATCH", "PROPFIND", "get"} {
		if r := CheckRequest(m, "/health", http.Header{}); r == nil || r.Status != http.StatusMethodNotAllowed {
			t.Errorf("method %s: %+v, want 405", m, r)
		}
	}
	if r := CheckRequest(http.MethodGet, "/v1/realtime", http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}}); r == nil {
		t.Error("a websocket upgrade is forwarded")
	}
}

func TestReplaceAndHoldBack(t *testing.T) {
	keys := [][]byte{[]byte("abcdefgh"), []byte("xyzxyzxyz")}
	if got := string(ReplaceKeys([]byte("1abcdefgh2xyzxyzxyz3abcdefgh"), keys)); got != "1<redacted>2<redacted>3<redacted>" {
		t.Errorf("ReplaceKeys: %s", got)
	}
	for in, want := range map[string]int{"data\n\n": 0, "..a": 1, "..abcdefg": 7, "..abcdefgh": 0, "xyzxy": 5, "x": 1, "": 0, "ab-": 0} {
		if got := HoldBack([]byte(in), keys, 9); got != want {
			t.Errorf("HoldBack(%q) = %d, want %d", in, got, want)
		}
	}
}

// A key split across the chunks of a stream, at every split point, is replaced; the chunks that
// cannot be a key's start arrive at once.
func TestStreamedKeysAreReplacedAcrossChunks(t *testing.T) {
	const key = "stream-key-0123456789abcdefghijklmn"
	for split := 1; split < len(key); split++ {
		read := make(chan struct{})
		url := through(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				return
			}
			fmt.Fprint(w, "data: "+key[:split])
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
			fmt.Fprint(w, key[split:]+"\n\n")
		}), key)
		resp, err := http.Get(url + "/generate")
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		got := make(chan string, 1)
		go func() { l, _ := r.ReadString('\n'); got <- l }()
		select {
		case l := <-got:
			if l != "data: first\n" {
				t.Fatalf("first line %q", l)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first event was held back")
		}
		close(read)
		rest, _ := io.ReadAll(r)
		resp.Body.Close()
		if string(rest) != "\ndata: <redacted>\n\n" {
			t.Errorf("split at %d: rest %q", split, rest)
		}
	}
}
