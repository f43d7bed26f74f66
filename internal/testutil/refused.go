package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// RefusedObject is an object of the hicache.io API that the API server refuses on create. The
// integration suite sends each to a real kube-apiserver and the kubectl plugin reads each as a
// file: both must refuse it with the same words, the ones in RefusedMessagesFile.
type RefusedObject struct {
	// Name names the case.
	Name string
	// Doc is the object as YAML.
	Doc string
	// Want is the part of the refusal that tells a person what to fix.
	Want string
}

// Kind is the object's kind.
func (r RefusedObject) Kind(t testing.TB) string {
	t.Helper()
	k, _ := r.Object(t)["kind"].(string)
	return k
}

// Object decodes the object.
func (r RefusedObject) Object(t testing.TB) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(r.Doc), &obj); err != nil {
		t.Fatalf("%s: decoding %q: %v", r.Name, r.Doc, err)
	}
	return obj
}

// RefusedMessagesFile holds the API server's full message for every RefusedObject (the part
// after `... is invalid: `), keyed by name. The integration suite writes it with -update from
// what the API server answered.
func RefusedMessagesFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "refused-messages.golden.json")
}

// RefusedMessages reads RefusedMessagesFile.
func RefusedMessages(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(RefusedMessagesFile())
	if err != nil {
		t.Fatalf("reading the API server's messages (the integration suite writes them with -update): %v", err)
	}
	out := map[string]string{}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// EncodeRefusedMessages is the content of RefusedMessagesFile for messages.
func EncodeRefusedMessages(t testing.TB, messages map[string]string) []byte {
	t.Helper()
	b, err := json.MarshalIndent(messages, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// refusedHCD is the HiCacheDeployment the HiCacheDeployment cases change: valid as it is.
const refusedHCD = `apiVersion: hicache.io/v1alpha1
kind: HiCacheDeployment
metadata: {name: x}
spec:
  model: {path: deepseek-ai/DeepSeek-V4, revision: 0123456789abcdef0123456789abcdef01234567}
  profile: DeepSeekV4
  topology: {tensorParallel: 16, gpusPerNode: 8}
  storage: {backendRef: {name: mooncake}}
`

// hcdWith is refusedHCD with the top-level fields of spec replaced by those of patch (a null
// removes one), named name.
func hcdWith(name, patch string) string {
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(refusedHCD), &obj); err != nil {
		panic(err)
	}
	p := map[string]any{}
	if err := yaml.Unmarshal([]byte(patch), &p); err != nil {
		panic(fmt.Sprintf("decoding %q: %v", patch, err))
	}
	spec := obj["spec"].(map[string]any)
	for k, v := range p {
		if v == nil {
			delete(spec, k)
			continue
		}
		spec[k] = v
	}
	obj["metadata"].(map[string]any)["name"] = name
	b, err := yaml.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// AcceptedObjects are HiCacheDeployments near the refused ones that the API server accepts, and
// so must the plugin: values of SGLang's choices and the combinations SGLang runs as written.
func AcceptedObjects() []RefusedObject {
	hcd := func(name, patch string) RefusedObject { return RefusedObject{Name: name, Doc: hcdWith("x", patch)} }
	return []RefusedObject{
		hcd("page_first_direct with the direct io backend", `hicache: {memLayout: page_first_direct, ioBackend: direct}`),
		hcd("page_first with the kernel io backend", `hicache: {memLayout: page_first, ioBackend: kernel}`),
		hcd("layer_first without an L3 store", "hicache: {memLayout: layer_first}\nstorage: null"),
		hcd("mxfp8 kv cache", `hicache: {kvCacheDType: mxfp8}`),
		hcd("nvfp4 kv cache", `hicache: {kvCacheDType: nvfp4}`),
		hcd("fp4_mx_block16 kv cache", `hicache: {kvCacheDType: fp4_mx_block16}`),
		hcd("bf16 draft kv cache", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: /drafts/m, kvCacheDType: bf16}}`),
		hcd("a hub draft at a commit", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: org/draft, revision: 0123456789abcdef0123456789abcdef01234567}}`),
		hcd("buffer_only with write_through", `hicache: {hostMemoryMode: buffer_only, writePolicy: write_through}`),
		hcd("weights from a claim's directory", `model: {servedName: deepseek-v4, revision: r1, weightsSize: 700Gi, source: {pvc: {claimName: dsv4-weights}, subPath: deepseek-ai/DeepSeek-V4}}`),
		hcd("weights from a node's directory", `model: {servedName: deepseek-v4, source: {hostPath: {path: /mnt/models/DeepSeek-V4}}}`),
		hcd("weights from the hub with a token", `model: {revision: 0123456789abcdef0123456789abcdef01234567, source: {hub: {repo: deepseek-ai/DeepSeek-V4, tokenSecretRef: {name: hf-token, key: token}, cacheSizeLimit: 900Gi}}}`),
		hcd("a startup budget", `probes: {startupSeconds: 3600}`),
		hcd("weights inside the image at an absolute path, without a revision", `model: {path: /opt/weights/DeepSeek-V4, servedName: deepseek-v4}`),
		hcd("prefill and decode roles", "roles: {prefill: {topology: {tensorParallel: 8}, replicas: 2}, decode: {topology: {tensorParallel: 16}}}"),
		hcd("decode HiCache with MTP", "topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE, numSteps: 3, eagleTopK: 1, numDraftTokens: 4}}\nroles: {prefill: {}, decode: {l3: HiCache}}"),
		hcd("prefill buffer_only with decode without L3", "hicache: {hostMemoryMode: buffer_only}\nroles: {prefill: {}, decode: {l3: None}}"),
		hcd("a prefill/decode router with a policy per role", "roles: {prefill: {}, decode: {}}\nrouter: {prefillPolicy: bucket, decodePolicy: power_of_two}"),
		hcd("pod overrides of a production deployment", `template:
  labels: {team: search}
  annotations: {prometheus.io/scrape: "false"}
  leader: {labels: {role: leader}, annotations: {prometheus.io/scrape: "true", prometheus.io/port: "30000"}}
  follower: {annotations: {role: follower}}
  env: [{name: HF_HOME, value: /models/cache}]
  volumes:
  - {name: weights, persistentVolumeClaim: {claimName: deepseek-v4, readOnly: true}}
  - {name: logs, emptyDir: {}}
  volumeMounts:
  - {name: weights, mountPath: /models, readOnly: true}
  - {name: logs, mountPath: /var/log/sglang}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: gpu, operator: In, values: [h200]}]}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {hicache.io/deployment: x}}}
  priorityClassName: inference-high
  schedulerName: volcano
  gangScheduling: {scheduler: Volcano, queue: inference}
  imagePullSecrets: [{name: registry}]
  securityContext: {fsGroup: 1000}
  containerSecurityContext: {allowPrivilegeEscalation: false}
  containers:
  - {name: logs, image: fluent-bit, ports: [{containerPort: 2020}], volumeMounts: [{name: logs, mountPath: /logs, readOnly: true}]}
  initContainers:
  - {name: fetch, image: fetcher, volumeMounts: [{name: weights, mountPath: /models}]}`),
		hcd("Kueue gang scheduling with a queue", `template: {gangScheduling: {scheduler: Kueue, queue: team-a}}`),
	}
}

// RefusedObjects is the table of objects the API server refuses, sorted by name.
func RefusedObjects() []RefusedObject {
	hcd := func(name, patch, want string) RefusedObject {
		return RefusedObject{Name: name, Doc: hcdWith("x", patch), Want: want}
	}
	out := []RefusedObject{
		hcd("unknown profile", `profile: GPT5`, `spec.profile: Unsupported value: "GPT5"`),
		hcd("a variable reference in servedName", `model: {path: /m, servedName: "$(HICACHE_ADMIN_API_KEY)"}`, "spec.model.servedName holds a $(NAME) reference"),
		hcd("no profile and no attention kind", `profile: null`, "set spec.profile to a built-in architecture"),
		hcd("unknown attention kind", `topology: {attention: GQA2, tensorParallel: 8}`, `spec.topology.attention: Unsupported value: "GQA2"`),
		hcd("tensor parallel zero", `topology: {tensorParallel: 0}`,
			"spec.topology.tensorParallel: Invalid value: 0: spec.topology.tensorParallel in body should be greater than or equal to 1"),
		hcd("tensor parallel too large", `topology: {tensorParallel: 512}`, "should be less than or equal to 256"),
		hcd("TP x PP neither a multiple nor a divisor of gpusPerNode", `topology: {tensorParallel: 3, gpusPerNode: 8}`,
			"tensorParallel x pipelineParallel must be a multiple or a divisor of gpusPerNode"),
		hcd("dp attention without data parallel", `topology: {tensorParallel: 8, dpAttention: true}`, "dpAttention needs dataParallel > 1 dividing tensorParallel"),
		hcd("hicache ratio not above 1", `hicache: {ratio: "1"}`, "spec.hicache.ratio must be greater than 1"),
		hcd("hicache ratio not a number", `hicache: {ratio: "two"}`, "spec.hicache.ratio in body should match"),
		hcd("ratio and size together", `hicache: {ratio: "2", sizeGB: 100}`, "set ratio or sizeGB, not both"),
		hcd("unknown memory layout", `hicache: {memLayout: page_last}`, `spec.hicache.memLayout: Unsupported value: "page_last"`),
		hcd("unknown kv cache dtype", `hicache: {kvCacheDType: int3}`, `spec.hicache.kvCacheDType: Unsupported value: "int3"`),
		hcd("buffer_only without storage", "hicache: {hostMemoryMode: buffer_only}\nstorage: null", "buffer_only keeps no KV in host memory and needs an L3 store"),
		hcd("draft that needs a model without one", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3}}`, "spec.topology.draft.modelPath is required"),
		hcd("unknown draft algorithm", `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: MEDUSA}}`, `spec.topology.draft.algorithm: Unsupported value: "MEDUSA"`),
		hcd("ngram draft with a model", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: NGRAM, modelPath: /x}}`, "modelPath must be empty for NGRAM"),
		hcd("kv cache dtype SGLang does not know", `hicache: {kvCacheDType: fp4_e2m1}`, `spec.hicache.kvCacheDType: Unsupported value: "fp4_e2m1"`),
		hcd("draft kv cache dtype only the target has", `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: /drafts/m, kvCacheDType: nvfp4}}`,
			`spec.topology.draft.kvCacheDType: Unsupported value: "nvfp4"`),
		hcd("draft algorithm the operator does not offer", `topology: {tensorParallel: 1, gpusPerNode: 8, draft: {algorithm: UNO}}`, `spec.topology.draft.algorithm: Unsupported value: "UNO"`),
		hcd("page_first_direct with the default io backend", `hicache: {memLayout: page_first_direct}`, "spec.hicache.memLayout page_first_direct needs ioBackend direct"),
		hcd("page_first_direct with the kernel io backend", `hicache: {memLayout: page_first_direct, ioBackend: kernel}`, "spec.hicache.memLayout page_first_direct needs ioBackend direct"),
		hcd("direct io backend with the default layout", `hicache: {ioBackend: direct}`, "spec.hicache.ioBackend direct needs memLayout page_first_direct or layer_first"),
		hcd("direct io backend with page_head", `hicache: {ioBackend: direct, memLayout: page_head}`, "spec.hicache.ioBackend direct needs memLayout page_first_direct or layer_first"),
		hcd("layer_first with an L3 store", `hicache: {memLayout: layer_first}`, "spec.hicache.memLayout layer_first is not supported with the Mooncake L3 store"),
		hcd("buffer_only with write_back", `hicache: {hostMemoryMode: buffer_only, writePolicy: write_back}`, "spec.hicache.writePolicy write_back does not apply to hostMemoryMode buffer_only"),
		hcd("sidecar draft without a model", `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE, numSteps: 3, eagleTopK: 1, packedLayers: 0}}`,
			"spec.topology.draft.modelPath is required with packedLayers 0"),
		hcd("ngram draft with packed layers", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: NGRAM, packedLayers: 0}}`,
			"NGRAM drafts from the prompt and keeps no draft KV"),
		hcd("separate draft model packed into the target", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: STANDALONE, modelPath: /drafts/m, packedLayers: 1}}`,
			"this algorithm runs a separate draft model: set packedLayers 0"),
		hcd("host pool of a packed draft", `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE, numSteps: 3, eagleTopK: 1, packedLayers: 1, hostPool: MHA}}`,
			"spec.topology.draft.hostPool is for a sidecar draft (packedLayers 0)"),
		hcd("DSpark packed into a model that is not DeepSeek-V4", "profile: Qwen3\ntopology: {tensorParallel: 4, gpusPerNode: 8, draft: {algorithm: DSPARK, modelPath: /drafts/m, packedLayers: 3}}",
			"packs DSpark layers only into a DeepSeek-V4 (DSV4) target"),
		hcd("attention that does not fit the profile's pools", `topology: {tensorParallel: 16, gpusPerNode: 8, attention: MLA}`,
			"spec.topology.attention does not fit the pools of spec.profile"),
		hcd("draft the profile has no layout for", "profile: GptOss\ntopology: {tensorParallel: 8, gpusPerNode: 8, draft: {algorithm: NEXTN}}",
			"spec.profile has no built-in layout for this algorithm"),
		hcd("sidecar draft of the profile without a model", "profile: Llama3\ntopology: {tensorParallel: 8, gpusPerNode: 8, draft: {algorithm: EAGLE}}",
			"spec.profile keeps this algorithm as a sidecar draft"),
		hcd("host pool of a draft the profile packs", `topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE, numSteps: 3, eagleTopK: 1, hostPool: MHA}}`,
			"spec.profile packs this algorithm into the target's pools"),
		hcd("MLA host pool on an MHA model", "profile: Qwen3\ntopology: {tensorParallel: 8, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: /drafts/m, hostPool: MLA}}",
			"spec.topology.draft.hostPool MLA needs a rank-replicated target"),
		hcd("dspark block size with another algorithm", `profile: DeepSeekV3
topology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: /drafts/m, dsparkBlockSize: 4}}`,
			"spec.topology.draft.dsparkBlockSize only applies to the DSPARK algorithm"),
		hcd("fixed strategy without a namespace", `storage: {backendRef: {name: m}, namespaceStrategy: Fixed}`, "spec.storage.namespace is required with the Fixed namespace strategy"),
		hcd("a Fixed namespace that looks like a LayoutHash one", `storage: {backendRef: {name: m}, namespaceStrategy: Fixed, namespace: hc-0123456789}`,
			"spec.storage.namespace may not start with hc-: such names are reserved for the namespaces the operator derives from layouts"),
		hcd("namespace with the LayoutHash strategy", `storage: {backendRef: {name: m}, namespace: mine}`, "spec.storage.namespace is only used with namespaceStrategy Fixed"),
		hcd("namespace that is not a DNS label", `storage: {backendRef: {name: m}, namespaceStrategy: Fixed, namespace: My_NS}`, "spec.storage.namespace in body should match"),
		{Name: "deployment name with a dot", Doc: hcdWith("qwen3.5-32b", `replicas: 1`), Want: "metadata.name must be a DNS label"},
		{Name: "deployment name too long for its pods' labels", Doc: hcdWith(strings.Repeat("n", 41), `replicas: 1`), Want: "of at most 40 characters"},
		hcd("negative replicas", `replicas: -1`, "spec.replicas in body should be greater than or equal to 0"),
		hcd("replicas beside roles", "replicas: 3\nroles: {prefill: {}, decode: {}}",
			"with spec.roles, set spec.roles.prefill.replicas and spec.roles.decode.replicas"),
		hcd("decode L3 without a store", "storage: null\nroles: {prefill: {}, decode: {l3: Offload}}",
			"spec.roles.decode.l3 Offload and HiCache write to the L3 store: set spec.storage.backendRef"),
		hcd("decode L3 in buffer_only", "hicache: {hostMemoryMode: buffer_only}\nroles: {prefill: {}, decode: {l3: HiCache}}",
			"buffer_only is refused by SGLang on decode servers"),
		hcd("decode HiCache with a STANDALONE draft", "profile: Qwen3\ntopology: {tensorParallel: 8, gpusPerNode: 8, draft: {algorithm: STANDALONE, modelPath: /drafts/m}}\nroles: {prefill: {}, decode: {l3: HiCache}}",
			"spec.roles.decode.l3 HiCache needs SGLang's decode radix cache"),
		hcd("unknown decode L3", "roles: {prefill: {}, decode: {l3: Sometimes}}", `spec.roles.decode.l3: Unsupported value: "Sometimes"`),
		hcd("a role's router policy without roles", "router: {decodePolicy: power_of_two}",
			"spec.router.prefillPolicy and spec.router.decodePolicy choose the servers of one role and apply only with spec.roles"),
		hcd("a router policy only prefill servers take", "roles: {prefill: {}, decode: {}}\nrouter: {decodePolicy: bucket}", `spec.router.decodePolicy: Unsupported value: "bucket"`),
		hcd("unknown transfer backend", "roles: {prefill: {}, decode: {}, transfer: {backend: fake}}", `spec.roles.transfer.backend: Unsupported value: "fake"`),
		hcd("RDMA devices over TCP", "roles: {prefill: {}, decode: {}, transfer: {backend: mooncake_tcp, ibDevice: mlx5_0}}",
			"spec.roles.transfer.ibDevice names RDMA devices, which the mooncake_tcp backend does not use"),
		hcd("a role's tensor parallel zero", "roles: {prefill: {topology: {tensorParallel: 0}}, decode: {}}",
			"spec.roles.prefill.topology.tensorParallel in body should be greater than or equal to 1"),
		hcd("the role flag in extra args", `template: {extraArgs: ["--disaggregation-mode", "decode"]}`,
			"spec.template.extraArgs sets --disaggregation-mode: set spec.roles instead"),
		hcd("model path blank", `model: {path: "  ", revision: 0123456789abcdef0123456789abcdef01234567}`, "spec.model.path is blank"),
		hcd("quantization SGLang does not know", `model: {path: m, revision: 0123456789abcdef0123456789abcdef01234567, quantization: int3}`, `spec.model.quantization: Unsupported value: "int3"`),
		hcd("model path empty", `model: {path: "", revision: 0123456789abcdef0123456789abcdef01234567}`, "spec.model.path in body should be at least 1 chars long"),
		hcd("model path and source together", `model: {path: m, revision: 0123456789abcdef0123456789abcdef01234567, servedName: m, source: {pvc: {claimName: w}}}`, "spec.model: set exactly one of path"),
		hcd("model with neither path nor source", `model: {servedName: m}`, "spec.model: set exactly one of path"),
		hcd("model source of two kinds", `model: {servedName: m, source: {pvc: {claimName: w}, hostPath: {path: /mnt/m}}}`, "spec.model.source: set exactly one of pvc"),
		hcd("model source of no kind", `model: {servedName: m, source: {subPath: m}}`, "spec.model.source: set exactly one of pvc"),
		hcd("hub source without a revision", `model: {source: {hub: {repo: org/m}}}`, "spec.model.revision must be a commit (40 lowercase hex characters) with a hub source"),
		hcd("hub source at a branch", `model: {revision: main, source: {hub: {repo: org/m}}}`,
			"spec.model.revision must be a commit (40 lowercase hex characters) with a hub source: a branch or a tag such as main can move to other weights while the spec stays the same, so ranks started before and after the move would write two layouts under one L3 namespace; pin the commit"),
		hcd("hub id path without a revision", `model: {path: org/m}`,
			"spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id (not an absolute path)"),
		hcd("hub id path at a tag", `model: {path: org/m, revision: v1.0}`,
			"spec.model.revision must be a commit (40 lowercase hex characters) when spec.model.path is a hub id"),
		hcd("hub id path at an abbreviated commit", `model: {path: org/m, revision: 5b0c7e2}`,
			"pin the commit the branch or tag points at, or serve a local path (an absolute one, or spec.model.source)"),
		hcd("hub draft without a revision", "profile: DeepSeekV3\ntopology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: org/draft}}",
			"spec.topology.draft.revision must be a commit (40 lowercase hex characters) when spec.topology.draft.modelPath is a hub id (not an absolute path)"),
		hcd("hub draft at a branch", "profile: DeepSeekV3\ntopology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: EAGLE3, modelPath: org/draft, revision: main}}",
			"pin the commit the branch or tag points at, or serve the draft from a local path (an absolute one)"),
		hcd("draft revision without a draft path", "profile: DeepSeekV3\ntopology: {tensorParallel: 16, gpusPerNode: 8, draft: {algorithm: NEXTN, revision: 0123456789abcdef0123456789abcdef01234567}}",
			"spec.topology.draft.revision is the revision of spec.topology.draft.modelPath"),
		hcd("draft revision in extraArgs", "template: {extraArgs: [--speculative-draft-model-revision, 0123456789abcdef0123456789abcdef01234567]}",
			"spec.template.extraArgs sets --speculative-draft-model-revision: set spec.topology.draft.revision instead"),
		hcd("claim source without a served name", `model: {source: {pvc: {claimName: w}}}`, "spec.model.servedName is required with a pvc or hostPath source"),
		hcd("model directory above the claim", `model: {servedName: m, source: {pvc: {claimName: w}, subPath: "a/../../b"}}`, "spec.model.source.subPath may not contain '..'"),
		hcd("model directory of a hub download", `model: {revision: 0123456789abcdef0123456789abcdef01234567, source: {hub: {repo: org/m}, subPath: m}}`, "spec.model.source.subPath is the model's directory inside a claim or a host path"),
		hcd("host path that is not absolute", `model: {servedName: m, source: {hostPath: {path: mnt/models}}}`, "spec.model.source.hostPath.path in body should match"),
		hcd("hub repository that is not an id", `model: {revision: 0123456789abcdef0123456789abcdef01234567, source: {hub: {repo: "https://huggingface.co/org/m"}}}`, "spec.model.source.hub.repo in body should match"),
		hcd("hub token without a key", `model: {revision: 0123456789abcdef0123456789abcdef01234567, source: {hub: {repo: org/m, tokenSecretRef: {name: hf}}}}`, "spec.model.source.hub.tokenSecretRef.key: Required value"),
		hcd("startup budget under a minute", `probes: {startupSeconds: 5}`, "spec.probes.startupSeconds in body should be greater than or equal to 60"),
		hcd("model path too long", `model: {revision: 0123456789abcdef0123456789abcdef01234567, path: `+strings.Repeat("m", 600)+`}`, "spec.model.path: Too long: may not be more than 512"),
		hcd("too many extra args", `template: {extraArgs: [`+strings.Repeat(`"--x",`, 70)+`"--y"]}`, "spec.template.extraArgs: Too many: 71: must have at most 64 items"),
		hcd("a refused flag in extra args", `template: {extraArgs: ["--log-level", "debug", "--kv-cache-dtype", "fp8_e4m3"]}`,
			"spec.template.extraArgs sets --kv-cache-dtype: set spec.hicache.kvCacheDType instead"),
		hcd("a refused flag=value in extra args", `template: {extraArgs: ["--tp-size=8"]}`, "spec.template.extraArgs sets --tp-size: set spec.topology.tensorParallel instead"),
		hcd("a config file in extra args", `template: {extraArgs: ["--config", "/etc/sglang.yaml"]}`, "spec.template.extraArgs sets --config: the operator sets it or the L3 cache cannot stay correct with it; remove it"),
		hcd("a compatible release the operator has no arguments of", `sglang: {image: "lmsysorg/sglang:v0.6.0", compatibleRelease: "0.6.0"}`,
			"spec.sglang.compatibleRelease must be a release the operator has the argument definitions of: 0.5.23"),
		hcd("an image of a release the operator has no arguments of", `sglang: {image: "lmsysorg/sglang:v0.6.0"}`,
			"spec.sglang.image: the operator has the arguments of SGLang 0.5.23 only"),
		hcd("a private build by tag", `sglang: {image: "registry.example/team/sglang:abc", compatibleRelease: "0.5.23"}`,
			"spec.sglang.image: its SGLang release is not read from its tag"),
		hcd("a volume with the operator's name", `template: {volumes: [{name: dshm, emptyDir: {}}]}`,
			"spec.template.volumes: dshm, hicache, model and infiniband are the operator's volumes"),
		hcd("a mount below the operator's configuration", `template: {volumes: [{name: w, emptyDir: {}}], volumeMounts: [{name: w, mountPath: /etc/hicache/extra}]}`,
			"spec.template.volumeMounts: /dev/shm, /etc/hicache and /dev/infiniband are where the operator mounts"),
		hcd("a mount over the weights of a model source", "model: {servedName: m, source: {pvc: {claimName: w}}}\ntemplate: {volumes: [{name: w, emptyDir: {}}], volumeMounts: [{name: w, mountPath: /models/extra}]}",
			"spec.template.volumeMounts: with spec.model.source the operator mounts the weights at /models"),
		hcd("a per-pod sub-path over the weights", `template: {volumes: [{name: w, persistentVolumeClaim: {claimName: w}}], volumeMounts: [{name: w, mountPath: /data, subPathExpr: "$(POD_NAME)"}]}`,
			"spec.template.volumeMounts: a subPathExpr gives each pod another directory of the volume"),
		hcd("a sidecar named like the hub download", `template: {containers: [{name: model-download, image: x}]}`,
			"spec.template.containers: sglang, guard and model-download are the operator's containers"),
		hcd("a mount over shared memory", `template: {volumes: [{name: w, emptyDir: {}}], volumeMounts: [{name: w, mountPath: /dev/shm}]}`,
			"spec.template.volumeMounts: /dev/shm, /etc/hicache and /dev/infiniband are where the operator mounts"),
		hcd("a sidecar named like the proxy", `template: {containers: [{name: guard, image: busybox}]}`,
			"spec.template.containers: sglang, guard and model-download are the operator's containers"),
		hcd("a sidecar named like the serving container", `template: {containers: [{name: sglang, image: busybox}]}`,
			"spec.template.containers: sglang, guard and model-download are the operator's containers"),
		hcd("a sidecar on SGLang's port", `template: {containers: [{name: proxy, image: envoy, ports: [{containerPort: 30000}]}]}`,
			"spec.template.containers: ports 30000 (SGLang's HTTP API) and 20102 (the group's rendezvous) are taken"),
		hcd("an init container named like the serving container", `template: {initContainers: [{name: sglang, image: busybox}]}`,
			"spec.template.initContainers: sglang, guard and model-download are the operator's containers"),
		hcd("an init container on the rendezvous port", `template: {initContainers: [{name: s, image: x, restartPolicy: Always, ports: [{containerPort: 20102}]}]}`,
			"spec.template.initContainers: ports 30000 (SGLang's HTTP API) and 20102 (the group's rendezvous) are taken"),
		hcd("a label the operator finds its pods by", `template: {labels: {hicache.io/group: "0"}}`,
			"spec.template.labels: keys under hicache.io/, apps.kubernetes.io/ and statefulset.kubernetes.io/ and controller-revision-hash are set by the operator"),
		hcd("an annotation of the operator", `template: {annotations: {hicache.io/layout-hash: forged}}`,
			"spec.template.annotations: keys under hicache.io/ are set by the operator"),
		hcd("a leader label of the StatefulSet controller", `template: {leader: {labels: {apps.kubernetes.io/pod-index: "1"}}}`,
			"spec.template.leader.labels and spec.template.follower.labels: keys under hicache.io/"),
		hcd("a follower annotation of the operator", `template: {follower: {annotations: {hicache.io/template-hash: x}}}`,
			"spec.template.leader.annotations and spec.template.follower.annotations: keys under hicache.io/ are set by the operator"),
		hcd("the L3 store's address in env", `template: {env: [{name: MOONCAKE_MASTER, value: "other:50051"}]}`,
			"spec.template.env: POD_IP, NODE_RANK and MOONCAKE_* are set by the operator"),
		hcd("the node rank in env", `template: {env: [{name: NODE_RANK, value: "3"}]}`,
			"spec.template.env: POD_IP, NODE_RANK and MOONCAKE_* are set by the operator"),
		hcd("Kueue gang scheduling without a queue", `template: {gangScheduling: {scheduler: Kueue}}`,
			"spec.template.gangScheduling.queue is required with Kueue"),
		hcd("a gang scheduler the operator does not know", `template: {gangScheduling: {scheduler: Yunikorn}}`,
			`spec.template.gangScheduling.scheduler: Unsupported value: "Yunikorn"`),
		hcd("Volcano gang scheduling under another scheduler", `template: {schedulerName: default-scheduler, gangScheduling: {scheduler: Volcano}}`,
			"spec.template.schedulerName: gangScheduling Volcano runs the rank pods with Volcano's scheduler"),
		{Name: "backend both managed and external", Want: "set exactly one of managed (the operator runs the master) or external", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: both}
spec:
  mooncake:
    managed: {}
    external: {rpcAddress: "m:50051", adminURL: "http://m:9003"}`},
		{Name: "backend neither managed nor external", Want: "set exactly one of managed", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: neither}
spec: {mooncake: {}}`},
		{Name: "backend of type Mooncake without mooncake settings", Want: "spec.mooncake is required when spec.type is Mooncake", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: empty}
spec: {type: Mooncake}`},
		{Name: "external backend with a bad admin URL", Want: "spec.mooncake.external.adminURL in body should match", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: badurl}
spec: {mooncake: {external: {rpcAddress: "m:50051", adminURL: "m:9003"}}}`},
		{Name: "managed backend in multi-tenant mode", Want: "multiTenant is only supported with an external master", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: tenants}
spec: {mooncake: {multiTenant: true, managed: {}}}`},
		{Name: "managed backend with several masters and no HA", Want: "spec.mooncake.managed.replicas above 1 needs spec.mooncake.managed.ha", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: twomasters}
spec: {mooncake: {managed: {replicas: 3}}}`},
		{Name: "managed backend with HA on no etcd", Want: "spec.mooncake.managed.ha.etcd.endpoints in body should have at least 1 items", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: noetcd}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {endpoints: []}}}}}`},
		{Name: "managed backend with HA on an existing and a managed etcd", Want: "spec.mooncake.managed.ha.etcd: set exactly one of endpoints (an existing etcd) or managed", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: twoetcds}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {endpoints: ["etcd:2379"], managed: {storage: {emptyDir: {}}}}}}}}`},
		{Name: "managed backend with HA on neither etcd", Want: "spec.mooncake.managed.ha.etcd: set exactly one of endpoints (an existing etcd) or managed", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: noetcdatall}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {clusterID: c}}}}}`},
		{Name: "managed etcd with an even number of members", Want: "spec.mooncake.managed.ha.etcd.managed.replicas must be odd (1, 3 or 5)", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: evenetcd}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {managed: {replicas: 2, storage: {size: 1Gi}}}}}}}`},
		{Name: "managed etcd of three members on emptyDir", Want: "spec.mooncake.managed.ha.etcd.managed.storage.emptyDir holds a 1-member etcd only", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: emptydir3}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {managed: {replicas: 3, storage: {emptyDir: {}}}}}}}}`},
		{Name: "managed etcd with no storage", Want: "spec.mooncake.managed.ha.etcd.managed.storage: set exactly one of size", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: nostorage}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {managed: {storage: {}}}}}}}`},
		{Name: "managed etcd with a storage class on emptyDir", Want: "spec.mooncake.managed.ha.etcd.managed.storage.storageClassName is only used with size", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: classonemptydir}
spec: {mooncake: {managed: {replicas: 3, ha: {etcd: {managed: {storage: {emptyDir: {}, storageClassName: fast}}}}}}}`},
		{Name: "external backend on etcd without a port", Want: "spec.mooncake.external.rpcAddress in body should match", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: etcdnoport}
spec: {mooncake: {external: {rpcAddress: "etcd://e1:2379;e2", adminURL: "http://m:9003"}}}`},
		{Name: "managed backend with an eviction ratio above 1", Want: "spec.mooncake.managed.evictionRatio in body should match", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: evict}
spec: {mooncake: {managed: {evictionRatio: "1.5"}}}`},
		{Name: "store pods with RDMA devices over tcp", Want: "spec.mooncake.managed.store.rdmaDevices is only used with protocol rdma", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: rdmadevices}
spec: {mooncake: {managed: {store: {segmentSize: 1Gi, rdmaDevices: [mlx5_0]}}}}`},
		{Name: "store pods with a drain timeout below 10 s", Want: "spec.mooncake.managed.store.drainTimeoutSeconds: Invalid value: 1: spec.mooncake.managed.store.drainTimeoutSeconds in body should be greater than or equal to 10", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheBackend
metadata: {name: draintimeout}
spec: {mooncake: {managed: {store: {segmentSize: 1Gi, drainTimeoutSeconds: 1}}}}`},
		{Name: "namespace flush without a prefix", Want: "spec.namespace (the key prefix to remove) is required when scope is Namespace", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: noprefix}
spec: {backendRef: {name: mooncake}, scope: Namespace}`},
		{Name: "tenant flush without a tenant", Want: "spec.tenant is required when scope is Tenant", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: notenant}
spec: {backendRef: {name: mooncake}, scope: Tenant}`},
		{Name: "flush of the whole store with a prefix", Want: "spec.namespace is only used with scope Namespace", Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: allprefix}
spec: {backendRef: {name: mooncake}, scope: All, namespace: hc-1}`},
		{Name: "unknown flush scope", Want: `spec.scope: Unsupported value: "Everything"`, Doc: `
apiVersion: hicache.io/v1alpha1
kind: CacheFlush
metadata: {name: badscope}
spec: {backendRef: {name: mooncake}, scope: Everything}`},
	}
	slices.SortFunc(out, func(a, b RefusedObject) int { return strings.Compare(a.Name, b.Name) })
	return out
}
