package hicachedeployment

// The layout oracle: a check, by construction, that the L3 namespace a rank pod writes under
// changes whenever what runs in its SGLang container changes in a way not known to be neutral.
//
// For a pair of HiCacheDeployment specs, each first admitted as the API server would (the CRD's
// defaults, schema and CEL rules, internal/crdvalidation) and then resolved and rendered by the
// controller's own code (resolveServing, render, buildRoleGroup, rankRoleMetadata), the oracle
// takes every rank pod that writes L3 (rank 0 and rank 1 of group 0 of every role whose ranks
// write the store) and reads from it, as the kubelet would start it, what SGLang runs and reads:
//
//   - the serving container's image, command and working directory;
//   - its environment, each variable resolved as the kubelet does (values in order, $(VAR) in a
//     value expanded from the variables before it, "$$" an escaped "$", an unresolvable
//     reference left as written, the last definition of a name winning; valueFrom as the
//     reference it is, or for the downward API the pod's own label or annotation);
//   - its arguments after the kubelet's $(VAR) expansion with that environment, parsed with the
//     pinned release's argument table (internal/sglang/argspec) into one value per destination,
//     a flag at the release's default counting as absent; the storage extra config JSON split
//     into its keys;
//   - every volume mount (path, sub-path, read-only, propagation) with the volume behind it;
//   - every init container and sidecar that writes a volume it mounts, or writes a volume such
//     a container reads (transitively): image, command and arguments (expanded), environment,
//     mounts and the rest of the container; one that only reads SGLang's volumes changes
//     nothing SGLang reads;
//   - the rendered cache ConfigMap's extra config, key by key.
//
// What differs between two such pods is one item each. An item is dropped only when a neutral
// table names it:
//
//   - extra arguments classified neutral in internal/sglang/extra_args.txt (keys flags are
//     allowed without a namespace change, but cache.Classify must then say Compatible);
//   - the operator's own rendered flags, by renderedFlagRules below, each with its rule and why,
//     stated from DOMAIN.md §2/§6/§9 and the pinned release's source: --tp-size, --dp-size,
//     --attn-dp-size and --enable-dp-attention matter through one derived item, the attention-TP
//     size, compared only when some pool the rank writes is rank-sharded (MHA/GQA target pools,
//     Mamba state, an MHA sidecar draft; not MHA kv cut into tp_lcm_size head slices by the
//     page_head layout); --mamba-ssm-dtype only with a Mamba pool; --disaggregation-mode and
//     --disaggregation-decode-enable-radix-cache are neutral (a decode server's HiCache is the
//     ordinary HiRadixCache), --disaggregation-decode-enable-offload-kvcache only for a model
//     without a draft whose pools are kv and swa, --enable-hierarchical-cache through that flag;
//     the operator's mount of the RDMA devices (/dev/infiniband) is the transport; the draft's
//     --speculative-num-steps only for a packed EAGLE/NEXTN draft, --speculative-num-draft-tokens
//     and --speculative-dspark-block-size are neutral (docs/compatibility.md, the draft's step
//     and token counts);
//   - per-pod values: the pod IP, node rank, pod name, the group's rendezvous address and the
//     operator's own hicache.io/ labels and annotations (hashes, group index) as the downward API
//     would give them;
//   - variables of the serving container the user writes, by their class in the release's table
//     (internal/sglang/env_vars.txt, read through sglang.EnvRuleOf): neutral ones are dropped,
//     keys ones are keys items, layout ones and names the table does not list are layout items;
//     a refused one that reaches a writer's pod is a finding by itself (the product must refuse
//     it). The variables the operator renders itself are judged by renderedEnvRules;
//   - which store and how to reach it (the operator's MOONCAKE_* and MC_* client variables, the
//     store keys of the extra config): another store holds other objects, the bytes SGLang
//     writes under a key do not depend on the transport;
//   - credentials (the admin and API keys, the hub token): they authenticate, they change no byte;
//   - SGLang's health-check setting (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION);
//   - the L3 namespace itself (extra_backend_tag, the ConfigMap's layout and plan files): the
//     output under test, not an input;
//   - resources, probes, ports, image pull policy and the size limit of an emptyDir (capacity
//     and health checks), and the pod's scheduling and security fields (node selector,
//     affinity, tolerations, priority, scheduler, gang scheduling, security contexts, service
//     account, pull secrets), which choose where and as whom a pod runs, not what it computes;
//   - containers that write no volume SGLang reads (the operator's proxy among them), and labels
//     and annotations that no downward-API reference reads;
//   - an emptyDir mounted into SGLang's container at a neutral mount point of the product's table
//     (resolve.NeutralMountPoints) that no other container writes: it starts empty, and all
//     SGLang finds there is what it wrote itself.
//
// Every other difference between two writers of one namespace (two specs' pods with equal
// extra_backend_tag and layout hash, or two pods of one spec: leader and follower, prefill and
// decode) fails the oracle, with the first differing item and both specs, unless every such
// item is one of the knownHoles below. Between specs the verdict of cache.Classify on the two
// configs must agree: Breaking when a layout item differs, at least Compatible when a keys item
// does. What the oracle takes from the resolver besides the pod is the topology (attention
// kind, pools, draft placement): the pod does not say which pools the model has.
//
// Not modelled: the content behind a reference (a ConfigMap, Secret or claim is compared by
// name), Service environment variables, the node's hardware (SGLang picks kernels by GPU), and
// a container image's content beyond its reference.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/cache"
	"github.com/hicache-io/hicache-operator/internal/controller/storeuse"
	"github.com/hicache-io/hicache-operator/internal/crdvalidation"
	"github.com/hicache-io/hicache-operator/internal/resolve"
	"github.com/hicache-io/hicache-operator/internal/sglang"
	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// itemClass is what a difference of one item means to the L3 objects.
type itemClass int

const (
	// dropped: a neutral table names it (per-pod, store, credential, output, neutral).
	classDropped itemClass = iota
	// classKeys: changes the keys by itself; allowed under one namespace, Compatible.
	classKeys
	// classLayout: may change the bytes behind a key; needs another namespace.
	classLayout
)

func (c itemClass) String() string {
	return [...]string{"dropped", "keys", "layout"}[c]
}

// item is one thing a rank's SGLang runs or reads.
type item struct {
	// value is what SGLang sees (after the kubelet's expansion); raw is the value as the pod spec
	// writes it, before expansion.
	value, raw string
	class      itemClass
	// why says which table dropped it, or which rule made it a layout or keys item.
	why string
}

// surface is every item of one rank pod, by name ("image", "env X", "arg --flag", ...).
type surface map[string]item

// oracleFlagRule is the oracle's own rule for a flag the operator renders.
type oracleFlagRule struct {
	class itemClass
	why   string
	// attentionTP: the flag's effect on the bytes is the derived attention-TP item;
	// mamba: a layout item only with a Mamba pool; extraConfig: split into its JSON keys.
	attentionTP, mamba, extraConfig, offload bool
	// packedSteps: a layout item only for a packed EAGLE/NEXTN draft.
	packedSteps bool
}

// renderedFlagRules are the flags the operator renders itself (sglang.Args), with what a change
// of each does to the L3 objects. extra_args.txt refuses them as extra arguments, so its table
// says nothing of them; a rendered flag missing here fails the oracle.
var renderedFlagRules = map[string]oracleFlagRule{
	"--model-path":     {class: classLayout, why: "the weights (DOMAIN §6: model identity)"},
	"--revision":       {class: classLayout, why: "the weights' revision (DOMAIN §6)"},
	"--quantization":   {class: classLayout, why: "weight quantization (DOMAIN §6)"},
	"--kv-cache-dtype": {class: classLayout, why: "KV dtype, the bytes of every KV object (DOMAIN §6)"},
	"--mamba-ssm-dtype": {class: classLayout, mamba: true,
		why: "the Mamba state dtype; read only for a Mamba pool (DOMAIN §6)"},
	"--hicache-mem-layout":               {class: classLayout, why: "the byte order of every object (DOMAIN §6)"},
	"--pp-size":                          {class: classLayout, why: "each stage writes its own layer slice (DOMAIN §6)"},
	"--speculative-algorithm":            {class: classLayout, why: "the draft layers and pools (DOMAIN §5)"},
	"--speculative-draft-model-path":     {class: classLayout, why: "the draft checkpoint (DOMAIN §6)"},
	"--speculative-draft-model-revision": {class: classLayout, why: "the draft checkpoint's revision (DOMAIN §6)"},
	"--speculative-draft-kv-cache-dtype": {class: classLayout, why: "the draft KV dtype (DOMAIN §6)"},
	"--speculative-num-steps": {class: classLayout, packedSteps: true,
		why: "a packed EAGLE/NEXTN draft packs every draft runner's pool and a multi-layer EAGLE has one runner per step (base_spec_worker.py _build_hicache_draft_plan, multi_layer_eagle_worker_v2.py draft_runners)"},
	"--speculative-num-draft-tokens": {class: classDropped,
		why: "neutral: sizes DeepSeek-V4's per-request rings (its c4 state ring is 16 rows with any draft, deepseek_v4_memory_pool.py get_compress_state_ring_size), the Mamba verify scratch left out of the host copy (memory_pool.py get_device_pool_infos) and device headroom; no host page"},
	"--speculative-dspark-block-size": {class: classDropped,
		why: "neutral: the draft tokens less one (speculative_hook.py _handle_dspark)"},
	"--speculative-eagle-topk": {class: classDropped,
		why: "neutral: read in mem_cache only to size device allocations (allocation_sizing.py)"},
	"--enable-hierarchical-cache": {class: classDropped,
		why: "a writer without it is a decode server offloading to L3, judged by --disaggregation-decode-enable-offload-kvcache"},
	"--hicache-host-memory-mode": {class: classDropped,
		why: "neutral: buffer_only keeps the same host pool and layout and only frees host rows at the storage ack (mem_cache/buffer_mode, cache_controller.py)"},
	"--hicache-storage-backend":              {class: classLayout, why: "the backend's own object format"},
	"--hicache-storage-backend-extra-config": {extraConfig: true, why: "split into its keys"},
	"--disaggregation-mode": {class: classDropped,
		why: "neutral: prefill and decode servers with HiCache run the ordinary HiRadixCache with the same host pools (docs/compatibility.md, who reads and writes L3)"},
	"--disaggregation-decode-enable-offload-kvcache": {class: classLayout, offload: true,
		why: "decode offload writes the decode's device pool alone, no draft, indexer or mamba pools (DecodeKVCacheOffloadManager): the same bytes only without those"},
	"--disaggregation-decode-enable-radix-cache": {class: classDropped,
		why: "neutral: a decode server's HiCache is the ordinary HiRadixCache (decode_hicache_mixin.py)"},
	"--served-model-name":               {class: classKeys, why: "part of every key (DOMAIN §6)"},
	"--page-size":                       {class: classKeys, why: "the page hash chains over page-size tokens: every key changes (DOMAIN §6)"},
	"--tp-size":                         {attentionTP: true, why: "through the attention-TP size"},
	"--dp-size":                         {attentionTP: true, why: "through the attention-TP size"},
	"--attn-dp-size":                    {attentionTP: true, why: "through the attention-TP size"},
	"--enable-dp-attention":             {attentionTP: true, why: "through the attention-TP size"},
	"--nnodes":                          {class: classDropped, why: "neutral: how many pods a group spans (placement)"},
	"--node-rank":                       {class: classDropped, why: "per pod: the node rank"},
	"--dist-init-addr":                  {class: classDropped, why: "per pod: the group leader's address"},
	"--host":                            {class: classDropped, why: "neutral: the listening address"},
	"--port":                            {class: classDropped, why: "neutral: the listening port"},
	"--admin-api-key":                   {class: classDropped, why: "credential"},
	"--api-key":                         {class: classDropped, why: "credential"},
	"--hicache-ratio":                   {class: classDropped, why: "neutral: host pool size (DOMAIN §6)"},
	"--hicache-size":                    {class: classDropped, why: "neutral: host pool size (DOMAIN §6)"},
	"--hicache-write-policy":            {class: classDropped, why: "neutral: when pages are written (DOMAIN §6)"},
	"--hicache-storage-prefetch-policy": {class: classDropped, why: "neutral: when pages are read (DOMAIN §6)"},
	"--hicache-io-backend": {class: classDropped,
		why: "neutral: the copy engine between device and host; the byte order is --hicache-mem-layout's, compared"},
	"--disaggregation-transfer-backend": {class: classDropped, why: "neutral: how KV moves between roles, not L3"},
	"--disaggregation-bootstrap-port":   {class: classDropped, why: "neutral: where decode finds prefill"},
	"--disaggregation-ib-device":        {class: classDropped, why: "neutral: the transfer's devices"},
}

// extraConfigClass is the class of one key of the storage extra config.
func extraConfigClass(key string) (itemClass, string) {
	switch key {
	case "extra_backend_tag":
		return classDropped, "the L3 namespace itself: the output under test"
	case "master_server_address", "metadata_server", "global_segment_size", "protocol", "device_name",
		"tenant_id", "master_metrics_port", "check_server":
		return classDropped, "which store and how to reach it"
	case "prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token":
		return classDropped, "neutral: prefetch policy (DOMAIN §6)"
	}
	return classLayout, "extra config key not known neutral"
}

// envClass is the class of a variable of a container's environment.
func envClass(container, name string) (itemClass, string) {
	switch {
	case name == "POD_IP" || name == "NODE_RANK":
		return classDropped, "per pod"
	case strings.HasPrefix(name, "MOONCAKE_") || strings.HasPrefix(name, "MC_"):
		return classDropped, "which store and how to reach it"
	case slices.Contains([]string{resolve.AdminAPIKeyEnv, resolve.APIKeyEnv, resolve.ServerAdminKeyEnv, resolve.ServerAPIKeyEnv}, name):
		return classDropped, "credential"
	case name == HubTokenEnv && container == "init "+hubDownloadContainer:
		return classDropped, "credential"
	case name == HealthGenerationEnv && container == "":
		return classDropped, "neutral: what /health does"
	}
	return classLayout, "environment variable not known neutral"
}

// renderedEnvRules are the variables the operator itself sets in the serving container, with
// what a change of each does to the L3 objects. A variable the user writes is judged by the
// release's table instead (servingEnvClass); one the operator renders that is missing here fails
// the oracle.
var renderedEnvRules = map[string]struct {
	class itemClass
	why   string
}{
	"POD_IP":                       {classDropped, "per pod"},
	"NODE_RANK":                    {classDropped, "per pod"},
	resolve.AdminAPIKeyEnv:         {classDropped, "credential"},
	resolve.APIKeyEnv:              {classDropped, "credential"},
	resolve.ServerAdminKeyEnv:      {classDropped, "credential"},
	resolve.ServerAPIKeyEnv:        {classDropped, "credential"},
	HealthGenerationEnv:            {classDropped, "neutral: what /health does"},
	"MOONCAKE_MASTER":              {classDropped, "which store and how to reach it"},
	"MOONCAKE_TE_META_DATA_SERVER": {classDropped, "which store and how to reach it"},
	"MOONCAKE_GLOBAL_SEGMENT_SIZE": {classDropped, "which store and how to reach it (capacity)"},
	"MOONCAKE_PROTOCOL":            {classDropped, "which store and how to reach it"},
	"MOONCAKE_MASTER_METRICS_PORT": {classDropped, "which store and how to reach it"},
	"MOONCAKE_DEVICE":              {classDropped, "which store and how to reach it"},
	"MOONCAKE_TENANT_ID":           {classDropped, "which store and how to reach it"},
	"MOONCAKE_LOCAL_HOSTNAME":      {classDropped, "which store and how to reach it"},
	sglang.EnvClusterID:            {classDropped, "which store and how to reach it"},
	sglang.EnvRPCTimeout:           {classDropped, "how the client reaches the master"},
	sglang.EnvRPCConnectTimeout:    {classDropped, "how the client reaches the master"},
}

// servingEnvClass is the class of a variable of the serving container's environment: by
// renderedEnvRules when the operator alone sets it, else by the release's table
// (internal/sglang/env_vars.txt through sglang.EnvRuleOf, which also holds the rule for a name
// the table does not list). refused is set when the table refuses a variable the pod runs with:
// the product should not have rendered it.
func servingEnvClass(name string, userSet bool) (class itemClass, why string, refused bool) {
	if r, ok := renderedEnvRules[name]; ok && !userSet {
		return r.class, r.why, false
	}
	if !userSet {
		return classLayout, "rendered by the operator, and not in the oracle's renderedEnvRules", false
	}
	rule, err := sglang.EnvRuleOf(name)
	if err != nil {
		return classLayout, err.Error(), false
	}
	switch rule.Class {
	case sglang.ArgNeutral:
		return classDropped, "neutral in env_vars.txt", false
	case sglang.ArgKeys:
		return classKeys, "keys in env_vars.txt: " + rule.Reason, false
	case sglang.ArgRefused:
		return classLayout, "refused in env_vars.txt: " + rule.Reason, true
	}
	return classLayout, "layout in env_vars.txt: " + rule.Reason, false
}

// knownHole is a class of difference the product does not namespace yet, fixed elsewhere. The
// oracle excuses a pair only when every layout item that differs under one namespace matches a
// known hole; TestLayoutOracleKnownHolesStillOpen fails once a hole's seed no longer finds it,
// so that its entry is removed when its fix lands.
type knownHole struct {
	name string
	// fix is the change that closes it.
	fix string
	// seed is the corpus file that shows it.
	seed  string
	match func(name string, a, b item) bool
}

// knownHoles is the one list of excused differences. Remove an entry when its fix merges.
var knownHoles = []knownHole{}

// oracleBackends are the CacheBackends a spec may name, Ready with their endpoints.
func oracleBackends() map[string]*resolve.Backend {
	return map[string]*resolve.Backend{
		"mooncake": BackendOf(&hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake"}}, &hicachev1alpha1.BackendEndpoints{
			RPCAddress: "mooncake-master.default.svc:50051", MetadataServer: hicachev1alpha1.DefaultMetadataServer, MetricsPort: 9003}, storeuse.DefaultEtcdImage),
		"mooncake-external": BackendOf(&hicachev1alpha1.CacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake-external"}}, &hicachev1alpha1.BackendEndpoints{
			RPCAddress: "mooncake-master.storage.svc:50051", MetadataServer: hicachev1alpha1.DefaultMetadataServer}, storeuse.DefaultEtcdImage),
	}
}

// oracleHook changes what the product decided for one role before its pods render: how a
// test plants a hole in the layout computation. nil for the product as it is.
type oracleHook func(r *resolve.Resolved)

// writer is one rank pod that writes L3, read as SGLang sees it.
type writer struct {
	pod string
	// identity is what decides which objects the pod may meet: its extra_backend_tag and the
	// layout hash it runs (a Fixed namespace is flushed when the hash changes).
	identity string
	surface  surface
	// startFails is set when SGLang's parser refuses the expanded command line: the pod writes
	// nothing.
	startFails string
	// refusedEnv are the variables the pod runs with that the release's table refuses.
	refusedEnv []string
}

// oracleRendering is one admitted spec as the oracle sees it.
type oracleRendering struct {
	hcd     *hicachev1alpha1.HiCacheDeployment
	res     *resolve.Resolved
	writers []writer
}

var oracleValidator = sync.OnceValues(crdvalidation.Default)

// admitForOracle defaults and validates h as the API server would at apply. It returns the
// admitted object, or the refusal.
func admitForOracle(h *hicachev1alpha1.HiCacheDeployment) (*hicachev1alpha1.HiCacheDeployment, error) {
	v, err := oracleValidator()
	if err != nil {
		return nil, err
	}
	in := h.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: hicachev1alpha1.GroupVersion.String(), Kind: "HiCacheDeployment"}
	in.Status = hicachev1alpha1.HiCacheDeploymentStatus{}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		return nil, err
	}
	delete(obj, "status")
	out, errs, err := v.Admit(context.Background(), obj, in.Namespace)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("refused at apply: %s", crdvalidation.Message(errs))
	}
	admitted := &hicachev1alpha1.HiCacheDeployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out, admitted); err != nil {
		return nil, err
	}
	return admitted, nil
}

// errOracleSkip marks a spec the operator would not run (refused at apply, by the resolver or
// by the renderer).
type errOracleSkip struct{ err error }

func (e errOracleSkip) Error() string { return "skipped: " + e.err.Error() }

// renderForOracle admits, resolves and renders h with the controller's code and reads its L3
// writers.
func renderForOracle(h *hicachev1alpha1.HiCacheDeployment, hook oracleHook) (*oracleRendering, error) {
	adm, err := admitForOracle(h)
	if err != nil {
		return nil, errOracleSkip{err}
	}
	res, served, err := resolveServing(adm)
	if err != nil {
		return nil, errOracleSkip{err}
	}
	if hook != nil {
		seen := map[*resolve.Resolved]bool{}
		for _, sr := range served {
			if !seen[sr.res] {
				seen[sr.res] = true
				hook(sr.res)
			}
		}
		if !seen[res] {
			hook(res)
		}
	}
	out := &oracleRendering{hcd: adm, res: res}
	if adm.Spec.Storage == nil {
		return out, nil // nothing is written to L3
	}
	be := oracleBackends()[adm.Spec.Storage.BackendRef.Name]
	if be == nil {
		return nil, errOracleSkip{fmt.Errorf("no CacheBackend %q", adm.Spec.Storage.BackendRef.Name)}
	}
	image := PodImages{SGLang: adm.Spec.SGLang.Image, Guard: storeuse.DefaultGuardImage}
	if image.SGLang == "" {
		image.SGLang = storeuse.Options{}.WithDefaults().DefaultSGLangImage
	}
	rd, err := render(adm, served, res, be, image)
	if err != nil {
		return nil, errOracleSkip{err}
	}
	spec, err := argspec.Default()
	if err != nil {
		return nil, err
	}
	rules, err := sglang.ArgRules()
	if err != nil {
		return nil, err
	}
	for _, sr := range served {
		if !sr.writesL3() {
			continue
		}
		key := GroupKey{role: sr.role, index: 0}
		sts := rd.groups[key]
		if sts == nil {
			continue // no group of this role (replicas 0)
		}
		ranks := []int{0}
		if *sts.Spec.Replicas > 1 {
			ranks = append(ranks, 1)
		}
		for _, rank := range ranks {
			pod, err := rankPod(adm, sts, rank)
			if err != nil {
				return nil, err
			}
			w := writer{pod: fmt.Sprintf("%s rank %d", key.describe(), rank)}
			userEnv := map[string]bool{}
			for _, e := range sr.spec.Spec.Template.Env {
				userEnv[e.Name] = true
			}
			w.surface, w.startFails, err = podSurface(pod, rd.configMap, sr.res.Topology, spec, rules, userEnv)
			for name, it := range w.surface {
				if env, ok := strings.CutPrefix(name, "env "); ok && strings.HasPrefix(it.why, "refused in env_vars.txt") {
					w.refusedEnv = append(w.refusedEnv, env)
				}
			}
			slices.Sort(w.refusedEnv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.pod, err)
			}
			w.identity = w.surface["namespace"].value + " layout " + pod.Annotations[hicachev1alpha1.AnnotationLayoutHash]
			delete(w.surface, "namespace")
			out.writers = append(out.writers, w)
		}
	}
	return out, nil
}

// rankPod is the pod the StatefulSet controller makes for ordinal rank, with the role labels and
// annotations the operator then sets on it (rankRoleMetadata).
func rankPod(hcd *hicachev1alpha1.HiCacheDeployment, sts *appsv1.StatefulSet, rank int) (*corev1.Pod, error) {
	t := sts.Spec.Template.DeepCopy()
	name := fmt.Sprintf("%s-%d", sts.Name, rank)
	labels := maps.Clone(t.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[appsv1.PodIndexLabel] = strconv.Itoa(rank)
	labels[appsv1.StatefulSetPodNameLabel] = name
	annotations := maps.Clone(t.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	rl, ra, err := rankRoleMetadata(&hcd.Spec.Template, rank)
	if err != nil {
		return nil, err
	}
	maps.Copy(labels, rl)
	maps.Copy(annotations, ra)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hcd.Namespace, Labels: labels, Annotations: annotations},
		Spec:       t.Spec,
	}, nil
}

// perPodLabel tells whether a label or annotation of a rank pod is the pod's own, or the
// operator's (hashes, group index, the namespace), rather than something a user wrote.
func perPodLabel(key string) bool {
	return strings.HasPrefix(key, hicachev1alpha1.LabelPrefix) || key == appsv1.PodIndexLabel ||
		key == appsv1.StatefulSetPodNameLabel || key == appsv1.ControllerRevisionHashLabelKey
}

// kubeletEnv resolves a container's environment as the kubelet does: in order, a value's $(VAR)
// references expanded from the variables defined before it, valueFrom resolved (the downward
// API from the pod; other sources as the reference they are). The last definition of a name
// wins.
func kubeletEnv(c *corev1.Container, pod *corev1.Pod) (map[string]string, []string) {
	env := map[string]string{}
	var order []string
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = kubeletExpand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v = downwardValue(e.ValueFrom.FieldRef.FieldPath, pod)
		case e.ValueFrom.ResourceFieldRef != nil:
			v = "resource " + e.ValueFrom.ResourceFieldRef.Resource + " (resources are neutral)"
		default:
			b, _ := json.Marshal(e.ValueFrom)
			v = "from " + string(b)
		}
		if _, seen := env[e.Name]; !seen {
			order = append(order, e.Name)
		}
		env[e.Name] = v
	}
	return env, order
}

// downwardValue is the value of a fieldRef: a user's label or annotation as the pod carries it,
// everything else (the pod's name, IP, node, the operator's labels) the same symbol on every pod.
func downwardValue(path string, pod *corev1.Pod) string {
	for _, m := range []struct {
		prefix string
		values map[string]string
	}{{"metadata.labels['", pod.Labels}, {"metadata.annotations['", pod.Annotations}} {
		if key, ok := strings.CutPrefix(path, m.prefix); ok {
			key = strings.TrimSuffix(key, "']")
			if perPodLabel(key) {
				return perPodSymbol(key)
			}
			if v, ok := m.values[key]; ok {
				return v
			}
			return ""
		}
	}
	if path == "metadata.labels" || path == "metadata.annotations" {
		b, _ := json.Marshal(userOnly(pod.Labels))
		if path == "metadata.annotations" {
			b, _ = json.Marshal(userOnly(pod.Annotations))
		}
		return string(b)
	}
	return perPodSymbol(path)
}

// perPodSymbol stands for a value of the pod's own (its ordinal, IP, name, the operator's labels):
// the same on every pod, and of a shape SGLang's parser accepts where the operator uses it.
func perPodSymbol(what string) string {
	switch what {
	case appsv1.PodIndexLabel:
		return "0"
	case "status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs":
		return "10.0.0.1"
	}
	return "per-pod-" + strings.NewReplacer("'", "", "[", "-", "]", "", "/", "-", " ", "-").Replace(what)
}

func userOnly(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !perPodLabel(k) {
			out[k] = v
		}
	}
	return out
}

// kubeletExpand expands $(VAR) references in s the way the kubelet expands a container's command,
// args and env values: "$$" is a literal "$"; "$(NAME)" is NAME's value when mapping defines it
// and is kept as written when it does not; a "$(" with no closing ")" is kept as written; a "$"
// before anything else is kept with that character.
func kubeletExpand(s string, mapping map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Incomplete: "$(" is kept and the scan goes on after it.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := mapping[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// podSurface reads every item of a rank pod's SGLang container and of what shares its volumes.
// startFails is the parser's refusal when the expanded command line would not start.
func podSurface(pod *corev1.Pod, cm *corev1.ConfigMap, topo cache.Topology, spec *argspec.Spec, rules map[string]sglang.ArgRule, userEnv map[string]bool) (surface, string, error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == resolve.ServingContainer {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, "", fmt.Errorf("no %s container", resolve.ServingContainer)
	}
	s := surface{}
	env, order := kubeletEnv(c, pod)
	s["image"] = item{value: sameSourceImage(c.Image), raw: c.Image, class: classLayout, why: "the SGLang code"}
	cmd := expandAll(c.Command, env)
	s["command"] = item{value: strings.Join(cmd, " "), raw: strings.Join(c.Command, " "), class: classLayout, why: "what runs"}
	s["workingDir"] = item{value: c.WorkingDir, raw: c.WorkingDir, class: classLayout, why: "relative paths"}
	for _, name := range order {
		if atReleaseDefault(name, env[name]) {
			continue // the value SGLang reads when the variable is unset
		}
		class, why, _ := servingEnvClass(name, userEnv[name])
		s["env "+name] = item{value: env[name], raw: env[name], class: class, why: why}
	}
	startFails := argItems(s, c.Args, env, topo, spec, rules)

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	// The volumes an init container or sidecar can change (the kubelet mounts ConfigMaps,
	// Secrets, projections, the downward API and image volumes read-only).
	writtenByOther := map[string]bool{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, o := range list {
			if o.Name == resolve.ServingContainer {
				continue
			}
			for _, m := range o.VolumeMounts {
				if oracleWrites(volumes[m.Name].VolumeSource, m) {
					writtenByOther[m.Name] = true
				}
			}
		}
	}
	mountItems(s, "", c.VolumeMounts, volumes, env, writtenByOther)

	// Init containers and sidecars that write a volume SGLang reads, directly or through another
	// (a container that writes what such a writer reads). One that only reads SGLang's volumes
	// changes nothing SGLang sees.
	shared := map[string]bool{}
	for _, m := range c.VolumeMounts {
		shared[m.Name] = true
	}
	type other struct {
		prefix string
		c      *corev1.Container
	}
	var others []other
	for i := range pod.Spec.InitContainers {
		others = append(others, other{"init " + pod.Spec.InitContainers[i].Name, &pod.Spec.InitContainers[i]})
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name != resolve.ServingContainer {
			others = append(others, other{"sidecar " + pod.Spec.Containers[i].Name, &pod.Spec.Containers[i]})
		}
	}
	in := map[string]bool{}
	for grown := true; grown; {
		grown = false
		for _, o := range others {
			if in[o.prefix] || !slices.ContainsFunc(o.c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return shared[m.Name] && oracleWrites(volumes[m.Name].VolumeSource, m)
			}) {
				continue
			}
			in[o.prefix], grown = true, true
			for _, m := range o.c.VolumeMounts {
				shared[m.Name] = true
			}
		}
	}
	for _, o := range others {
		if in[o.prefix] {
			containerItems(s, o.prefix, o.c, pod, volumes)
		}
	}

	// The rendered ConfigMap mounted at /etc/hicache.
	for k, v := range cm.Data {
		switch {
		case k == "extra-config.json":
			var extra map[string]any
			if err := json.Unmarshal([]byte(v), &extra); err != nil {
				return nil, "", fmt.Errorf("the ConfigMap's extra-config.json: %w", err)
			}
			for key, val := range extra {
				b, _ := json.Marshal(val)
				class, why := extraConfigClass(key)
				s["configmap extra-config "+key] = item{value: string(b), raw: string(b), class: class, why: why}
			}
		case k == "layout.txt" || strings.HasSuffix(k, "plan.txt") || strings.HasSuffix(k, "plan.json"):
			// The namespace and the rank plans: the output, for people and tools.
		default:
			s["configmap "+k] = item{value: v, raw: v, class: classLayout, why: "a file SGLang may read"}
		}
	}
	if _, ok := s["namespace"]; !ok {
		return nil, "", fmt.Errorf("the command line carries no extra_backend_tag")
	}
	return s, startFails, nil
}

func expandAll(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, a := range in {
		out[i] = kubeletExpand(a, env)
	}
	return out
}

// argItems parses the expanded command line into one item per destination. It returns the
// parser's refusal when SGLang would not start.
func argItems(s surface, args []string, env map[string]string, topo cache.Topology, spec *argspec.Spec, rules map[string]sglang.ArgRule) string {
	expanded := expandAll(args, env)
	occ, err := spec.Parse(expanded)
	if err != nil {
		return err.Error()
	}
	rawOcc, _ := spec.Parse(args)
	rawByIndex := map[int]argspec.Occurrence{}
	for _, o := range rawOcc {
		rawByIndex[o.Index] = o
	}
	values, raws := map[string]string{}, map[string]string{}
	flags := map[string]argspec.Argument{}
	for _, o := range occ {
		d := o.Argument.Dest
		v := occValue(o)
		var raw string
		if r, ok := rawByIndex[o.Index]; ok && r.Argument.Dest == d {
			raw = occValue(r)
		} else {
			raw = "(expanded from " + strings.Join(args, " ") + ")"
		}
		if prev, seen := values[d]; seen && o.Argument.Action != argspec.ActionStore && o.Argument.Nargs.Max != 0 {
			v, raw = prev+" "+v, raws[d]+" "+raw
		}
		values[d], raws[d], flags[d] = v, raw, o.Argument
	}
	var attnTP struct{ tp, dp int }
	attnTP.tp, attnTP.dp = 1, 1
	dpAttention := false
	layout, tpLCM := "page_first", 0
	for d, a := range flags {
		flag := a.Flags[0]
		v := values[d]
		if flag == "--hicache-mem-layout" {
			layout = v
		}
		if def, ok := argDefaultText(a); ok && def == v && flag != "--hicache-storage-backend-extra-config" {
			if flag == "--tp-size" || flag == "--dp-size" || flag == "--attn-dp-size" || flag == "--enable-dp-attention" {
				n, _ := strconv.Atoi(v)
				switch flag {
				case "--tp-size":
					attnTP.tp = n
				case "--dp-size":
					attnTP.dp = n
				}
			}
			continue // at the release's default: the same as absent
		}
		rule, own := renderedFlagRules[flag]
		switch {
		case own && rule.attentionTP:
			n, _ := strconv.Atoi(v)
			switch flag {
			case "--tp-size":
				attnTP.tp = n
			case "--dp-size":
				attnTP.dp = n
			case "--attn-dp-size":
				attnTP.dp, dpAttention = n, true
			case "--enable-dp-attention":
				dpAttention = v == "true"
			}
			s["arg "+flag] = item{value: v, raw: raws[d], class: classDropped, why: "counted in the attention-TP size"}
		case own && rule.extraConfig:
			var extra map[string]any
			if err := json.Unmarshal([]byte(v), &extra); err != nil {
				s["arg "+flag] = item{value: v, raw: raws[d], class: classLayout, why: "unreadable extra config"}
				continue
			}
			for key, val := range extra {
				b, _ := json.Marshal(val)
				if key == "extra_backend_tag" {
					s["namespace"] = item{value: fmt.Sprint(val)}
					continue
				}
				if key == "tp_lcm_size" {
					f, _ := val.(float64)
					tpLCM = int(f)
				}
				class, why := extraConfigClass(key)
				s["extra-config "+key] = item{value: string(b), raw: string(b), class: class, why: why}
			}
		case own:
			class, why := rule.class, rule.why
			if rule.mamba && !slices.Contains(topo.Pools, cache.PoolMamba) {
				class, why = classDropped, "neutral: no Mamba pool, the release does not read it"
			}
			if rule.packedSteps && (topo.Draft.Placement != cache.DraftPlacementPacked ||
				(topo.Draft.Algorithm != cache.DraftEAGLE && topo.Draft.Algorithm != cache.DraftNEXTN)) {
				class, why = classDropped, "neutral: a sidecar draft registers its first runner only (base_spec_worker.py), DSPARK and DFLASH run one"
			}
			if rule.offload && !topo.Draft.Enabled() && !slices.ContainsFunc(topo.Pools, func(p cache.PoolName) bool { return p != cache.PoolKV && p != cache.PoolSWA }) {
				class, why = classDropped, "neutral: without a draft and with only kv and swa pools the offload writes the prefill's objects (build_kv_host_pool, build_hybrid_swa_stack)"
			}
			s["arg "+flag] = item{value: v, raw: raws[d], class: class, why: why}
		default:
			r, ok := rules[flag]
			class, why := classLayout, "not classified for the pinned release"
			if ok {
				switch r.Class {
				case sglang.ArgNeutral:
					class, why = classDropped, "neutral in extra_args.txt"
				case sglang.ArgKeys:
					class, why = classKeys, "keys in extra_args.txt: "+r.Reason
				case sglang.ArgLayout:
					why = "layout in extra_args.txt: " + r.Reason
				case sglang.ArgRefused:
					why = "refused in extra_args.txt, rendered by the operator, and not in the oracle's renderedFlagRules"
				}
			}
			s["arg "+flag] = item{value: v, raw: raws[d], class: class, why: why}
		}
	}
	// The attention-TP size, which decides the bytes of every rank-sharded object.
	tp := attnTP.tp
	if dpAttention && attnTP.dp > 0 {
		tp = attnTP.tp / attnTP.dp
	}
	v := "no rank-sharded pool is written"
	if writesShardedPool(topo, layout, tpLCM, attnTP.tp) {
		v = strconv.Itoa(tp)
	}
	s["attention-TP size of rank-sharded pools"] = item{value: v, raw: v, class: classLayout,
		why: "each rank-sharded object holds 1/attention-TP of the heads (DOMAIN §2, §6)"}
	return ""
}

// writesShardedPool is DOMAIN.md §2 restated: on MHA/GQA targets (and their Mamba hybrids) every
// target pool is split across attention-TP ranks, except kv under the page_head layout with a
// tp_lcm_size above the TP size, whose objects are head slices of a fixed size
// (cache_controller.py: should_split_heads); Mamba state is split on every model; a sidecar
// draft's pools are split when its host pool is MHA. MLA and DeepSeek-V4 pools are replicated.
func writesShardedPool(t cache.Topology, layout string, tpLCM, tp int) bool {
	mhaTarget := t.Attention == cache.AttentionMHA || t.Attention == cache.AttentionHybridMambaMHA
	for _, p := range t.Pools {
		switch {
		case p == cache.PoolMamba:
			return true
		case mhaTarget && p == cache.PoolKV && layout == "page_head" && tpLCM > tp:
		case mhaTarget:
			return true
		}
	}
	return t.Draft.Placement == cache.DraftPlacementSidecar && t.Draft.HostPoolKind == cache.HostPoolMHA && len(t.Draft.Pools) > 0
}

// occValue is what one option sets: its values joined by spaces, or true/false for a switch.
func occValue(o argspec.Occurrence) string {
	if len(o.Values) > 0 {
		return strings.Join(o.Values, " ")
	}
	if o.Argument.Action == argspec.ActionStoreFalse ||
		(o.Argument.Action == argspec.ActionBooleanOptional && strings.HasPrefix(o.Flag, "--no-")) {
		return "false"
	}
	return "true"
}

// argDefaultText is the release's literal default of a as a command line would write it.
func argDefaultText(a argspec.Argument) (string, bool) {
	if len(a.Default) == 0 {
		return "", false
	}
	var def any
	if err := json.Unmarshal(a.Default, &def); err != nil {
		return "", false
	}
	switch d := def.(type) {
	case string:
		return d, true
	case bool:
		return strconv.FormatBool(d), true
	case float64:
		return strconv.FormatFloat(d, 'g', -1, 64), true
	}
	return "", false
}

// mountItems reads a container's mounts, each with the volume behind it.
func mountItems(s surface, prefix string, mounts []corev1.VolumeMount, volumes map[string]corev1.Volume, env map[string]string, writtenByOther map[string]bool) {
	for _, m := range mounts {
		vol := volumes[m.Name]
		v := vol.VolumeSource.DeepCopy()
		if v.EmptyDir != nil {
			v.EmptyDir.SizeLimit = nil // capacity
		}
		b, _ := json.Marshal(struct {
			Volume           *corev1.VolumeSource          `json:"volume"`
			SubPath          string                        `json:"subPath,omitempty"`
			SubPathExpr      string                        `json:"subPathExpr,omitempty"`
			ReadOnly         bool                          `json:"readOnly,omitempty"`
			RecursiveRO      *corev1.RecursiveReadOnlyMode `json:"recursiveReadOnly,omitempty"`
			MountPropagation *corev1.MountPropagationMode  `json:"mountPropagation,omitempty"`
		}{v, m.SubPath, kubeletExpand(m.SubPathExpr, env), m.ReadOnly, m.RecursiveReadOnly, m.MountPropagation})
		name := strings.TrimSpace(prefix + " mount " + m.MountPath)
		if m.Name == "infiniband" && prefix == "" {
			// The operator's mount of the RDMA devices: the transport, no file SGLang reads.
			s[name] = item{value: string(b), raw: string(b), class: classDropped, why: "the RDMA devices: how bytes move, not what they are"}
			continue
		}
		if prefix == "" && vol.EmptyDir != nil && oracleNeutralMountPoint(m.MountPath) && !writtenByOther[m.Name] {
			// An emptyDir no other container writes, where SGLang keeps nothing it reads: all
			// SGLang finds there is what it wrote itself.
			s[name] = item{value: string(b), raw: string(b), class: classDropped, why: "an emptyDir at a neutral mount point that only SGLang writes"}
			continue
		}
		s[name] = item{value: string(b), raw: string(b), class: classLayout, why: "what SGLang reads at " + m.MountPath}
	}
}

// oracleWrites tells whether a container's mount can change the volume's files as the kubelet
// mounts it: not read-only, of a kind the kubelet does not always mount read-only (nor a claim,
// NFS export or CSI volume whose source says readOnly), or with its mounts propagating back to
// the volume (Bidirectional).
func oracleWrites(v corev1.VolumeSource, m corev1.VolumeMount) bool {
	if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
		return true
	}
	alwaysRO := v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil || v.Image != nil ||
		(v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly) || (v.NFS != nil && v.NFS.ReadOnly) ||
		(v.CSI != nil && v.CSI.ReadOnly != nil && *v.CSI.ReadOnly)
	return !m.ReadOnly && !alwaysRO
}

// oracleNeutralMountPoint tells whether p is at or below a neutral mount point of the
// product's table (resolve.NeutralMountPoints), where SGLang and the images keep nothing it
// reads.
func oracleNeutralMountPoint(p string) bool {
	p = path.Clean(p)
	return slices.ContainsFunc(resolve.NeutralMountPoints, func(n resolve.NeutralMountPoint) bool {
		return p == n.Path || strings.HasPrefix(p, n.Path+"/")
	})
}

// containerItems reads a container that writes a volume SGLang reads.
func containerItems(s surface, prefix string, c *corev1.Container, pod *corev1.Pod, volumes map[string]corev1.Volume) {
	env, order := kubeletEnv(c, pod)
	s[prefix+" image"] = item{value: c.Image, raw: c.Image, class: classLayout, why: "writes what SGLang reads"}
	cmd := strings.Join(append(expandAll(c.Command, env), expandAll(c.Args, env)...), " ")
	rawCmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	s[prefix+" command"] = item{value: cmd, raw: rawCmd, class: classLayout, why: "writes what SGLang reads"}
	for _, name := range order {
		class, why := envClass(prefix, name)
		s[prefix+" env "+name] = item{value: env[name], raw: env[name], class: class, why: why}
	}
	mountItems(s, prefix, c.VolumeMounts, volumes, env, nil)
	rest := c.DeepCopy()
	rest.Name, rest.Image, rest.Command, rest.Args, rest.Env, rest.VolumeMounts = "", "", nil, nil, nil, nil
	rest.Resources, rest.ResizePolicy = corev1.ResourceRequirements{}, nil
	rest.LivenessProbe, rest.ReadinessProbe, rest.StartupProbe = nil, nil, nil
	rest.Ports, rest.ImagePullPolicy, rest.SecurityContext = nil, "", nil
	rest.TerminationMessagePath, rest.TerminationMessagePolicy = "", ""
	b, _ := json.Marshal(rest)
	s[prefix+" rest"] = item{value: string(b), raw: string(b), class: classLayout, why: "writes what SGLang reads"}
}

// diffItem is one item that differs between two writers.
type diffItem struct {
	name  string
	a, b  item
	class itemClass
}

func (d diffItem) String() string {
	why := d.a.why
	if d.b.class > d.a.class {
		why = d.b.why
	}
	return fmt.Sprintf("%s: %q -> %q (%s: %s)", d.name, d.a.value, d.b.value, d.class, why)
}

// absentItem is an item one side does not have.
var absentItem = item{value: "<absent>", raw: "<absent>"}

// compareSurfaces lists every item that differs, in name order, each with the stronger of its
// two classes.
func compareSurfaces(a, b surface) []diffItem {
	names := slices.Sorted(maps.Keys(union2(a, b)))
	var out []diffItem
	for _, n := range names {
		ia, oka := a[n]
		ib, okb := b[n]
		if !oka {
			ia = absentItem
			ia.class, ia.why = ib.class, ib.why
		}
		if !okb {
			ib = absentItem
			ib.class, ib.why = ia.class, ia.why
		}
		if ia.value == ib.value {
			continue
		}
		out = append(out, diffItem{name: n, a: ia, b: ib, class: max(ia.class, ib.class)})
	}
	return out
}

func union2(a, b surface) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// oracleFinding is a counterexample: two writers of one namespace that run different layouts,
// or a verdict of cache.Classify that disagrees with the items.
type oracleFinding struct {
	what string
	// first is the first differing item; all are every item that is not excused.
	first diffItem
	all   []diffItem
	// excusedBy names the known holes that excuse it ("" when none does).
	excusedBy []string
}

// excuse returns the known holes that cover every item, or nil when one is not covered.
func excuse(items []diffItem) []string {
	var names []string
	for _, d := range items {
		i := slices.IndexFunc(knownHoles, func(h knownHole) bool { return h.match(d.name, d.a, d.b) })
		if i < 0 {
			return nil
		}
		if !slices.Contains(names, knownHoles[i].name) {
			names = append(names, knownHoles[i].name)
		}
	}
	return names
}

// judgePair compares every writer of a with every writer of b, and the writers of each spec
// among themselves, and checks cache.Classify's verdict on the pair.
func judgePair(a, b *oracleRendering) []oracleFinding {
	var out []oracleFinding
	type side struct {
		spec string
		w    writer
	}
	var all []side
	for _, w := range a.writers {
		all = append(all, side{"old", w})
	}
	for _, w := range b.writers {
		all = append(all, side{"new", w})
	}
	for _, x := range all {
		if len(x.w.refusedEnv) > 0 && x.w.startFails == "" {
			out = append(out, oracleFinding{what: fmt.Sprintf("%s spec's %s runs with %s, which internal/sglang/env_vars.txt refuses", x.spec, x.w.pod, strings.Join(x.w.refusedEnv, ", "))})
		}
	}
	crossLayout, crossKeys := false, false
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			x, y := all[i], all[j]
			if x.w.startFails != "" || y.w.startFails != "" {
				continue // a pod SGLang refuses to start writes nothing
			}
			diffs := compareSurfaces(x.w.surface, y.w.surface)
			var layout []diffItem
			for _, d := range diffs {
				switch d.class {
				case classLayout:
					layout = append(layout, d)
					if x.spec != y.spec {
						crossLayout = true
					}
				case classKeys:
					if x.spec != y.spec {
						crossKeys = true
					}
				}
			}
			if len(layout) == 0 || x.w.identity != y.w.identity {
				continue
			}
			out = append(out, oracleFinding{
				what:      fmt.Sprintf("%s spec's %s and %s spec's %s write namespace %s with different layouts", x.spec, x.w.pod, y.spec, y.w.pod, x.w.identity),
				first:     layout[0],
				all:       layout,
				excusedBy: excuse(layout),
			})
		}
	}
	if len(a.writers) == 0 || len(b.writers) == 0 {
		return out
	}
	ch := cache.Classify(a.res.Config(a.hcd), b.res.Config(b.hcd))
	sameIdentity := a.writers[0].identity == b.writers[0].identity
	switch {
	case crossLayout && !sameIdentity && ch.Kind != cache.Breaking:
		out = append(out, oracleFinding{what: fmt.Sprintf("the namespaces differ but cache.Classify says %s", ch)})
	case crossKeys && !crossLayout && sameIdentity && ch.Kind == cache.Neutral:
		out = append(out, oracleFinding{what: fmt.Sprintf("a keys item differs under one namespace but cache.Classify says %s", ch)})
	}
	return out
}

// describePair is both specs, for a failure.
func describePair(a, b *hicachev1alpha1.HiCacheDeployment) string {
	var buf bytes.Buffer
	for _, s := range []struct {
		name string
		h    *hicachev1alpha1.HiCacheDeployment
	}{{"old", a}, {"new", b}} {
		y, _ := yaml.Marshal(s.h.Spec)
		fmt.Fprintf(&buf, "--- %s spec:\n%s", s.name, y)
	}
	return buf.String()
}

// describeFinding is a finding in words.
func describeFinding(f oracleFinding) string {
	if len(f.all) == 0 {
		return f.what
	}
	lines := make([]string, 0, len(f.all))
	for _, d := range f.all {
		lines = append(lines, "  "+d.String())
	}
	sort.Strings(lines)
	return fmt.Sprintf("%s; first differing item: %s\nevery differing layout item:\n%s", f.what, f.first, strings.Join(lines, "\n"))
}

// sglangBuildTag is a tag of SGLang's own images that names a release and the build of it: the
// -cuNNN, -runtime, -amd64 and -arm64 builds are one release's source for NVIDIA GPUs, compiled for
// another CUDA or CPU architecture (the release's Dockerfile builds each from the same tag of the
// source; the layout of the host pools and keys is its Python, the same in every one).
var sglangBuildTag = regexp.MustCompile(`^(.*/)?(lmsysorg/sglang):(v[0-9]+\.[0-9]+\.[0-9]+)((-cu[0-9]+)|(-runtime)|(-amd64)|(-arm64))*$`)

// sameSourceImage is an image reference with the build suffixes of an SGLang release tag dropped,
// so that two builds of one release compare equal and anything else compares as written.
func sameSourceImage(ref string) string {
	if m := sglangBuildTag.FindStringSubmatch(ref); m != nil {
		return m[2] + ":" + m[3]
	}
	return ref
}

// atReleaseDefault tells whether value is the one literal default every read of the variable
// in the pinned wheels gives it (internal/sglang/argspec/sglang-env.json, extracted from the
// wheels' source): set to it or unset, the variable runs the same code.
func atReleaseDefault(name, value string) bool {
	t, err := argspec.DefaultEnv()
	if err != nil {
		return false
	}
	v, ok := t.Lookup(name)
	if !ok {
		return false
	}
	d, ok := v.Default()
	return ok && d == value
}
