package imagebuild

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDockerfile(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []Stage
		wantErr string
	}{
		"multi-stage, continuation lines, exec and shell forms, ARG expansion": {
			in: `# syntax comment
ARG BASE=debian:bookworm
FROM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} \
    GOARCH=$TARGETARCH go build

FROM $BASE
ARG V=1.2
ARG VERSION=3.4
USER 65532:65532
# inside
ENTRYPOINT []
CMD echo $VERSION
`,
			want: []Stage{
				{From: "golang:1.26", Args: map[string]string{"BASE": "debian:bookworm", "TARGETOS": "linux", "TARGETARCH": "amd64"},
					Runs: []string{"CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=$TARGETARCH go build"}},
				{From: "debian:bookworm", Args: map[string]string{"BASE": "debian:bookworm", "V": "1.2", "VERSION": "3.4"},
					User: "65532:65532", Entrypoint: []string{}, Cmd: []string{"/bin/sh", "-c", "echo $VERSION"}},
			},
		},
		"exec form": {
			in:   "FROM scratch\nENTRYPOINT [\"/manager\", \"--x\"]\n",
			want: []Stage{{From: "scratch", Args: map[string]string{}, Entrypoint: []string{"/manager", "--x"}}},
		},
		"bad exec form": {in: "FROM scratch\nCMD [\"a\",\n", wantErr: "CMD"},
		"no FROM":       {in: "# nothing\n", wantErr: "no FROM"},
		"USER first":    {in: "USER 1\nFROM scratch\n", wantErr: "before the first FROM"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDockerfile([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("stages (-want +got):\n%s", d)
			}
		})
	}
}
