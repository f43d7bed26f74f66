package resolve_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

func TestModelPlacement(t *testing.T) {
	cases := map[string]struct {
		hcd                       *hicachev1alpha1.HiCacheDeployment
		wantPath, wantID, wantRev string
		wantServed                string
		wantErr                   string
	}{
		"a path, as it is": {
			hcd: makeHCD("q").Revision("1111111111111111111111111111111111111111").Obj(), wantPath: "org/q", wantID: "org/q", wantRev: "1111111111111111111111111111111111111111", wantServed: "org/q",
		},
		"an absolute path needs no revision": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").Revision("").Obj()
				h.Spec.Model.Path = "/opt/weights/qwen3"
				return h
			}(),
			wantPath: "/opt/weights/qwen3", wantID: "/opt/weights/qwen3", wantServed: "/opt/weights/qwen3",
		},
		"a claim at its root": {
			hcd:      makeHCD("q").FromClaim("weights", "").Revision("v1").Obj(),
			wantPath: "/models", wantID: "pvc:weights", wantServed: "org/q",
		},
		"a directory of a claim": {
			hcd:      makeHCD("q").FromClaim("weights", "/Qwen/Qwen3-32B/").Obj(),
			wantPath: "/models/Qwen/Qwen3-32B", wantID: "pvc:weights/Qwen/Qwen3-32B", wantServed: "org/q",
		},
		"a host path": {
			hcd:      makeHCD("q").FromHostPath("/mnt/models", "qwen3").Obj(),
			wantPath: "/models/qwen3", wantID: "hostPath:/mnt/models/qwen3", wantServed: "org/q",
		},
		"a hub download: the repository names and identifies the model": {
			hcd:      makeHCD("q").FromHub("Qwen/Qwen3-32B", "1111111111111111111111111111111111111111", "hf", "token").Obj(),
			wantPath: "/models/Qwen/Qwen3-32B", wantID: "Qwen/Qwen3-32B", wantServed: "Qwen/Qwen3-32B",
		},
		"a hub download without a revision": {
			hcd:     makeHCD("q").FromHub("Qwen/Qwen3-32B", "", "", "").Obj(),
			wantErr: "spec.model.revision: is required: spec.model.source.hub downloads Qwen/Qwen3-32B when each rank pod starts, and a branch or a tag such as main can move to other weights",
		},
		"a hub download at a branch": {
			hcd:     makeHCD("q").FromHub("Qwen/Qwen3-32B", "main", "", "").Obj(),
			wantErr: `spec.model.revision: "main" is a branch or a tag, not a commit: spec.model.source.hub downloads Qwen/Qwen3-32B`,
		},
		"a hub download at an abbreviated commit": {
			hcd:     makeHCD("q").FromHub("Qwen/Qwen3-32B", "5b0c7e2", "", "").Obj(),
			wantErr: `pin the commit (40 lowercase hex characters) the branch or tag points at`,
		},
		"a hub download at an upper-case commit": {
			hcd:     makeHCD("q").FromHub("Qwen/Qwen3-32B", "ABCDEF0123456789ABCDEF0123456789ABCDEF01", "", "").Obj(),
			wantErr: `"ABCDEF0123456789ABCDEF0123456789ABCDEF01" is a branch or a tag, not a commit`,
		},
		"a hub id SGLang downloads, without a revision": {
			hcd:     makeHCD("q").Revision("").Obj(),
			wantErr: `spec.model.revision: is required: spec.model.path "org/q" is a hub id (not an absolute path), which SGLang downloads when each rank starts`,
		},
		"a hub id SGLang downloads, at a tag": {
			hcd:     makeHCD("q").Revision("v1.0").Obj(),
			wantErr: `"v1.0" is a branch or a tag, not a commit: spec.model.path "org/q" is a hub id`,
		},
		"a relative path is taken for a hub id": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").Revision("").Obj()
				h.Spec.Model.Path = "models/qwen3"
				return h
			}(),
			wantErr: `spec.model.path "models/qwen3" is a hub id (not an absolute path)`,
		},
		"a claim without a served name": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").FromClaim("weights", "").Obj()
				h.Spec.Model.ServedName = ""
				return h
			}(),
			wantErr: "spec.model.servedName: is required with a pvc or hostPath source",
		},
		"a path and a source": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").FromClaim("weights", "").Obj()
				h.Spec.Model.Path = "org/q"
				return h
			}(),
			wantErr: `spec.model: path "org/q" and source are both set`,
		},
		"neither": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").Obj()
				h.Spec.Model.Path = ""
				return h
			}(),
			wantErr: "spec.model: set path",
		},
		"two sources": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").FromClaim("weights", "").Obj()
				h.Spec.Model.Source.HostPath = &hicachev1alpha1.HostPathModelSource{Path: "/mnt"}
				return h
			}(),
			wantErr: "spec.model.source: set exactly one of pvc",
		},
		"a directory above the claim": {
			hcd: makeHCD("q").FromClaim("weights", "a/../../etc").Obj(), wantErr: "spec.model.source.subPath: may not contain '..'",
		},
		"a directory of a hub download": {
			hcd: func() *hicachev1alpha1.HiCacheDeployment {
				h := makeHCD("q").FromHub("Qwen/Qwen3-32B", "abc", "", "").Obj()
				h.Spec.Model.Source.SubPath = "x"
				return h
			}(),
			wantErr: "spec.model.source.subPath: is the model's directory inside a claim or a host path",
		},
	}
	spec, err := argspec.Default()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolve.Model(&tc.hcd.Spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if _, rerr := resolve.Resolve(tc.hcd); rerr == nil || rerr.Error() != err.Error() {
					t.Errorf("Resolve says %v, Model %v: the controller and the plugin must refuse it alike", rerr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Path != tc.wantPath || got.Identity != tc.wantID || got.Revision != tc.wantRev {
				t.Errorf("placement %+v, want path %q identity %q revision %q", got, tc.wantPath, tc.wantID, tc.wantRev)
			}
			if s := resolve.ServedModelName(&tc.hcd.Spec); s != tc.wantServed {
				t.Errorf("served name %q, want %q", s, tc.wantServed)
			}
			// What SGLang is given: --model-path from the source, --revision only for a path,
			// and a line the pinned release accepts.
			r, err := resolve.Resolve(tc.hcd)
			if err != nil {
				t.Fatal(err)
			}
			cfg, _, err := resolve.ServerConfig(tc.hcd, r, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			args, err := sglang.Args(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := spec.Validate(args); err != nil {
				t.Errorf("the pinned SGLang refuses %q: %v", args, err)
			}
			line := " " + strings.Join(args, " ") + " "
			if !strings.Contains(line, " --model-path "+tc.wantPath+" ") {
				t.Errorf("args %q lack --model-path %s", args, tc.wantPath)
			}
			if hasRev := strings.Contains(line, " --revision "); hasRev != (tc.wantRev != "") {
				t.Errorf("args %q: --revision rendered %v, want %v", args, hasRev, tc.wantRev != "")
			}
			if r.Facts[cacheFactModel] != tc.wantID {
				t.Errorf("model fact %q, want %q", r.Facts[cacheFactModel], tc.wantID)
			}
		})
	}
}

const cacheFactModel = "model"

// TestModelSourceAndLayout: the source changes the namespace only through the model's identity
// and revision; how the weights travel does not.
func TestModelSourceAndLayout(t *testing.T) {
	base := makeHCD("d").Profile("DeepSeekV4").TP(16).Served("deepseek-v4")
	hash := func(h *hicachev1alpha1.HiCacheDeployment) string {
		t.Helper()
		r, err := resolve.Resolve(h)
		if err != nil {
			t.Fatal(err)
		}
		return r.Fingerprint
	}
	withPath := func(path, rev string) *hicachev1alpha1.HiCacheDeployment {
		h := base.Obj()
		h.Spec.Model.Path, h.Spec.Model.Revision = path, rev
		return h
	}
	hub := func(repo, rev, secret string, limit string) *hicachev1alpha1.HiCacheDeployment {
		h := base.Obj()
		h.Spec.Model.Path, h.Spec.Model.Revision = "", rev
		h.Spec.Model.Source = &hicachev1alpha1.ModelSource{Hub: &hicachev1alpha1.HubModelSource{Repo: repo}}
		if secret != "" {
			h.Spec.Model.Source.Hub.TokenSecretRef = &hicachev1alpha1.SecretKeyRef{Name: secret, Key: "token"}
		}
		if limit != "" {
			h.Spec.Model.Source.Hub.CacheSizeLimit = ptr.To(resource.MustParse(limit))
		}
		return h
	}
	claim := func(name, sub, rev string) *hicachev1alpha1.HiCacheDeployment {
		h := base.Obj()
		h.Spec.Model.Path, h.Spec.Model.Revision = "", rev
		h.Spec.Model.Source = &hicachev1alpha1.ModelSource{PVC: &hicachev1alpha1.ClaimModelSource{ClaimName: name}, SubPath: sub}
		return h
	}
	same := map[string][2]*hicachev1alpha1.HiCacheDeployment{
		"SGLang's own download and the operator's, one repository and revision": {withPath("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111"), hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "", "")},
		"another token Secret":      {hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "a", ""), hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "b", "")},
		"a bound on the download":   {hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "", ""), hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "", "900Gi")},
		"a claim with a slash more": {claim("w", "dsv4", "r1"), claim("w", "/dsv4/", "r1")},
	}
	for name, pair := range same {
		if a, b := hash(pair[0]), hash(pair[1]); a != b {
			t.Errorf("%s: the layout changed (%s → %s)", name, a[:10], b[:10])
		}
	}
	differ := map[string][2]*hicachev1alpha1.HiCacheDeployment{
		"another revision on the hub":   {hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "", ""), hub("deepseek-ai/DeepSeek-V4", "2222222222222222222222222222222222222222", "", "")},
		"another revision in the claim": {claim("w", "dsv4", "r1"), claim("w", "dsv4", "r2")},
		"another claim":                 {claim("w", "dsv4", "r1"), claim("w2", "dsv4", "r1")},
		"another directory":             {claim("w", "dsv4", "r1"), claim("w", "dsv4-base", "r1")},
		"a claim instead of the hub":    {hub("deepseek-ai/DeepSeek-V4", "1111111111111111111111111111111111111111", "", ""), claim("w", "deepseek-ai/DeepSeek-V4", "r1")},
	}
	for name, pair := range differ {
		if a, b := hash(pair[0]), hash(pair[1]); a == b {
			t.Errorf("%s: the layout stayed %s", name, a[:10])
		}
	}
}

func TestStartupBudget(t *testing.T) {
	cases := map[string]struct {
		hcd      *hicachev1alpha1.HiCacheDeployment
		want     int32
		wantFrom string
	}{
		"set":                                  {hcd: makeHCD("q").StartupSeconds(1200).WeightsSize("700Gi").Obj(), want: 1200, wantFrom: "spec.probes.startupSeconds"},
		"700Gi of weights":                     {hcd: makeHCD("q").WeightsSize("700Gi").Obj(), want: 600 + 5250, wantFrom: "spec.model.weightsSize 700Gi"},
		"a small model, rounded to the period": {hcd: makeHCD("q").WeightsSize("1Gi").Obj(), want: 610},
		"one GPU, size unknown":                {hcd: makeHCD("q").Obj(), want: 600 + 300, wantFrom: "1 GPUs x 40Gi"},
		"DeepSeek-V4 on 16 GPUs, size unknown": {hcd: makeHCD("d").Profile("DeepSeekV4").TP(16).Obj(), want: 600 + 4800, wantFrom: "16 GPUs x 40Gi"},
		"bounded by the API's maximum":         {hcd: makeHCD("q").WeightsSize("100Ti").Obj(), want: 86400},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := resolve.Resolve(tc.hcd)
			if err != nil {
				t.Fatal(err)
			}
			got, from := resolve.StartupBudget(&tc.hcd.Spec, r)
			if got != tc.want || !strings.Contains(from, tc.wantFrom) {
				t.Errorf("budget %d s (%s), want %d s from %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

// A hub draft checkpoint is downloaded by SGLang at main unless its commit is named in
// spec.topology.draft.revision, which the resolver passes as --speculative-draft-model-revision.
func TestDraftRevisionMustBeACommit(t *testing.T) {
	const commit = "3333333333333333333333333333333333333333"
	draft := func(path, rev string) *hicachev1alpha1.HiCacheDeployment {
		h := makeHCD("q").TP(4).Draft("EAGLE3").Obj()
		h.Spec.Topology.Draft.ModelPath, h.Spec.Topology.Draft.Revision = path, rev
		return h
	}
	cases := map[string]struct {
		hcd     *hicachev1alpha1.HiCacheDeployment
		wantErr string // "" when accepted
	}{
		"a local draft":                      {hcd: draft("/models/eagle3", "")},
		"a local draft with a free revision": {hcd: draft("/models/eagle3", "dev")},
		"a hub draft at a commit":            {hcd: draft("org/eagle3", commit)},
		"a hub draft without a revision": {hcd: draft("org/eagle3", ""),
			wantErr: `spec.topology.draft.revision: is required: spec.topology.draft.modelPath "org/eagle3" is a hub id (not an absolute path), which SGLang downloads when each rank starts (at main without a revision), and a branch or a tag such as main can move to other weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit (40 lowercase hex characters) the branch or tag points at, or serve the draft from a local path (an absolute one)`},
		"a hub draft at a branch": {hcd: draft("org/eagle3", "main"),
			wantErr: `spec.topology.draft.revision: "main" is a branch or a tag, not a commit`},
		"a hub draft at an abbreviated commit": {hcd: draft("org/eagle3", commit[:12]),
			wantErr: `spec.topology.draft.revision: "333333333333" is a branch or a tag, not a commit`},
		"a revision without a draft path": {hcd: func() *hicachev1alpha1.HiCacheDeployment {
			h := makeHCD("q").Profile("DeepSeekV3").TP(8).Draft("NEXTN").Obj()
			h.Spec.Topology.Draft.ModelPath, h.Spec.Topology.Draft.Revision = "", commit
			return h
		}(), wantErr: "spec.topology.draft.revision: is the revision of spec.topology.draft.modelPath, which is not set"},
		"the revision in extraArgs": {hcd: func() *hicachev1alpha1.HiCacheDeployment {
			h := draft("org/eagle3", commit)
			h.Spec.Template.ExtraArgs = []string{"--speculative-draft-model-revision=" + commit}
			return h
		}(), wantErr: "spec.template.extraArgs sets --speculative-draft-model-revision, which is the draft checkpoint revision, a layout fact (a hub draft must name a commit); set spec.topology.draft.revision instead"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := resolve.Resolve(tc.hcd)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got, want := r.Facts[cache.FactDraftRevision], tc.hcd.Spec.Topology.Draft.Revision; got != want {
					t.Errorf("layout fact %s = %q, want %q", cache.FactDraftRevision, got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
