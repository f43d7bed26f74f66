package imagebuild

import (
	"strings"
	"testing"
)

func TestDebianMirror(t *testing.T) {
	deb822 := `Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
`
	cases := map[string]struct {
		files   []SourceFile
		want    string
		wantErr bool
	}{
		"deb822": {
			files: []SourceFile{{Name: "debian.sources", Data: []byte(deb822)}},
			want:  "http://mirror.example/debian",
		},
		"deb822 disabled stanza, then another": {
			files: []SourceFile{{Name: "a.sources", Data: []byte("Enabled: no\n" + deb822 +
				"\nTypes: deb-src deb\nURIs: http://second.example/debian\n  http://third.example/debian\nSuites: bookworm\nComponents: contrib main\n")}},
			want: "http://second.example/debian",
		},
		"one-line format with options, comments and other suites first": {
			files: []SourceFile{{Name: "sources.list", Data: []byte(`# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb http://updates.example/debian bookworm-updates main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://opts.example/debian bookworm main contrib # trailing
`)}},
			want: "http://opts.example/debian",
		},
		"sources.list before sources.list.d": {
			files: []SourceFile{
				{Name: "sources.list", Data: []byte("deb http://first.example/debian bookworm main\n")},
				{Name: "debian.sources", Data: []byte(deb822)},
			},
			want: "http://first.example/debian",
		},
		"a suite without main is not enough": {
			files:   []SourceFile{{Name: "sources.list", Data: []byte("deb http://x.example/debian bookworm contrib\n")}},
			wantErr: true,
		},
		"another release only": {
			files:   []SourceFile{{Name: "sources.list", Data: []byte("deb http://x.example/debian trixie main\n")}},
			wantErr: true,
		},
		"nothing": {wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := DebianMirror(tc.files, "bookworm")
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "-mirror") {
					t.Fatalf("got %q, %v; want an error that says how to pass a mirror", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
