package imagebuild

import "testing"

func TestKey(t *testing.T) {
	base := []Input{{Name: "go.sum", Data: []byte("a")}, {Name: "main.go", Data: []byte("package main")}}
	want := Key(base)
	same := map[string][]Input{
		"the same inputs":       {{Name: "go.sum", Data: []byte("a")}, {Name: "main.go", Data: []byte("package main")}},
		"in another order":      {{Name: "main.go", Data: []byte("package main")}, {Name: "go.sum", Data: []byte("a")}},
		"a copy of the content": {{Name: "go.sum", Data: append([]byte(nil), 'a')}, {Name: "main.go", Data: []byte("package main")}},
	}
	for name, in := range same {
		if got := Key(in); got != want {
			t.Errorf("%s: key %s, want %s", name, got, want)
		}
	}
	other := map[string][]Input{
		"content changed":            {{Name: "go.sum", Data: []byte("b")}, {Name: "main.go", Data: []byte("package main")}},
		"file renamed":               {{Name: "go.sum", Data: []byte("a")}, {Name: "cmd.go", Data: []byte("package main")}},
		"file added":                 append(append([]Input(nil), base...), Input{Name: "x.go", Data: nil}),
		"file removed":               base[:1],
		"bytes moved between inputs": {{Name: "go.sum", Data: []byte("ap")}, {Name: "main.go", Data: []byte("ackage main")}},
		"bytes moved into the name":  {{Name: "go.suma", Data: nil}, {Name: "main.go", Data: []byte("package main")}},
	}
	for name, in := range other {
		if got := Key(in); got == want {
			t.Errorf("%s: key unchanged (%s)", name, got)
		}
	}
	if Key(nil) != Key([]Input{}) || Key(nil) == want {
		t.Errorf("no inputs: Key(nil) %s, Key([]Input{}) %s", Key(nil), Key([]Input{}))
	}
	if len(want) != 64 {
		t.Errorf("key %q is not a hex sha256", want)
	}
}
