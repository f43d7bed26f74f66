package sglang

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hicache-io/hicache-operator/internal/sglang/argspec"
)

// Command is the program the rendered arguments follow.
func Command() []string {
	return []string{"python3", "-m", "sglang.launch_server"}
}

// varRef matches a whole Kubernetes variable reference such as $(NODE_RANK).
var varRef = regexp.MustCompile(`^\$\([A-Za-z_][A-Za-z0-9_]*\)$`)

// Args renders the arguments that follow Command(), in a fixed order:
// model, HTTP, topology, memory, speculative decoding, HiCache, ExtraArgs.
// It refuses configurations the pinned release would reject or silently
// rewrite, and checks the result against the release's arguments.
func Args(cfg ServerConfig) ([]string, error) {
	spec, err := argspec.ForRelease(cfg.Release)
	if err != nil {
		return nil, fmt.Errorf("loading the sglang argument table: %w", err)
	}
	r := &renderer{}
	r.model(cfg)
	r.topology(cfg)
	r.disaggregation(cfg, spec)
	r.memory(cfg)
	r.speculative(cfg, spec)
	r.hicache(cfg)
	r.extraArgs(cfg, spec)
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	if err := spec.Validate(r.forValidation()); err != nil {
		return nil, err
	}
	return r.args, nil
}

type renderer struct {
	args []string
	errs []error
	// nodeRankIndex is the position of the --node-rank value, which is
	// usually a variable reference the kubelet expands.
	nodeRankIndex int
}

func (r *renderer) add(flag string, values ...string) {
	r.args = append(r.args, flag)
	r.args = append(r.args, values...)
}

func (r *renderer) addInt(flag string, v int) { r.add(flag, strconv.Itoa(v)) }

func (r *renderer) fail(format string, a ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, a...))
}

// forValidation returns the arguments with a variable reference for the
// node rank replaced by a rank, so that the int check applies to the rest.
func (r *renderer) forValidation() []string {
	out := slices.Clone(r.args)
	if r.nodeRankIndex > 0 && varRef.MatchString(out[r.nodeRankIndex]) {
		out[r.nodeRankIndex] = "0"
	}
	return out
}

func (r *renderer) model(cfg ServerConfig) {
	if strings.TrimSpace(cfg.ModelPath) == "" {
		r.fail("ModelPath is empty: set the model directory or Hugging Face repository to serve")
	}
	r.add("--model-path", cfg.ModelPath)
	if cfg.ServedModelName != "" {
		r.add("--served-model-name", cfg.ServedModelName)
	}
	if cfg.Revision != "" {
		r.add("--revision", cfg.Revision)
	}
	host := cfg.Host
	if host == "" {
		host = DefaultHost
	}
	port := cfg.Port
	if port == 0 {
		port = DefaultPort
	}
	if port < 1 || port > 65535 {
		r.fail("the port %d is outside 1-65535", port)
	}
	r.add("--host", host)
	r.addInt("--port", port)
	for _, k := range []struct{ flag, name, value string }{
		{"--admin-api-key", "AdminAPIKey", cfg.AdminAPIKey}, {"--api-key", "APIKey", cfg.APIKey},
	} {
		if k.value == "" {
			continue
		}
		if !varRef.MatchString(k.value) {
			// Never quote the value: it may be a key.
			r.fail("%s is not a variable reference such as $(HICACHE_ADMIN_API_KEY): a key written into the command line would be readable in the pod spec", k.name)
			continue
		}
		r.add(k.flag, k.value)
	}
}

func (r *renderer) topology(cfg ServerConfig) {
	for _, f := range []struct {
		name  string
		value int
	}{{"TP", cfg.TP}, {"PP", cfg.PP}, {"DP", cfg.DP}, {"EP", cfg.EP}, {"NNodes", cfg.NNodes}, {"PageSize", cfg.PageSize}} {
		if f.value < 0 {
			r.fail("%s is %d; it must be positive, or 0 for the default", f.name, f.value)
		}
	}
	if cfg.TP > 0 {
		r.addInt("--tp-size", cfg.TP)
	}
	if cfg.PP > 1 {
		r.addInt("--pp-size", cfg.PP)
	}
	tp := max(cfg.TP, 1)
	switch {
	case cfg.EnableDPAttention:
		// The release deprecates --dp-size N --enable-dp-attention in favour
		// of --attn-dp-size N, which it resolves to the same layout.
		if cfg.DP < 2 {
			r.fail("EnableDPAttention needs DP of at least 2 (the number of attention data-parallel groups), got %d", cfg.DP)
		} else if tp%cfg.DP != 0 {
			r.fail("with EnableDPAttention, TP (%d) must be a multiple of DP (%d): each attention group takes TP/DP ranks", tp, cfg.DP)
		}
		if cfg.DP > 0 {
			r.addInt("--attn-dp-size", cfg.DP)
		}
	case cfg.DP > 1:
		r.addInt("--dp-size", cfg.DP)
	}
	if cfg.EP > 1 {
		r.addInt("--ep-size", cfg.EP)
	}
	if cfg.NNodes > 1 {
		if cfg.NodeRankEnv == "" {
			r.fail("NNodes is %d but NodeRankEnv is empty: set it to the node rank, usually a reference such as $(NODE_RANK)", cfg.NNodes)
		} else if _, err := strconv.Atoi(cfg.NodeRankEnv); err != nil && !varRef.MatchString(cfg.NodeRankEnv) {
			r.fail("NodeRankEnv %q is neither a number nor a variable reference such as $(NODE_RANK)", cfg.NodeRankEnv)
		}
		if cfg.DistInitAddr == "" {
			r.fail("NNodes is %d but DistInitAddr is empty: set the leader's host:port, such as leader-dns:20102", cfg.NNodes)
		} else if _, port, err := net.SplitHostPort(cfg.DistInitAddr); err != nil || port == "" {
			r.fail("DistInitAddr %q is not host:port", cfg.DistInitAddr)
		}
		r.addInt("--nnodes", cfg.NNodes)
		r.add("--node-rank", cfg.NodeRankEnv)
		r.nodeRankIndex = len(r.args) - 1
		r.add("--dist-init-addr", cfg.DistInitAddr)
	} else if cfg.NodeRankEnv != "" || cfg.DistInitAddr != "" {
		r.fail("NodeRankEnv and DistInitAddr only apply to servers spanning several nodes, but NNodes is %d", cfg.NNodes)
	}
}

func (r *renderer) memory(cfg ServerConfig) {
	if cfg.PageSize > 0 {
		r.addInt("--page-size", cfg.PageSize)
	}
	if cfg.KVCacheDType != "" {
		r.add("--kv-cache-dtype", cfg.KVCacheDType)
	}
	if cfg.MambaSSMDType != "" {
		r.add("--mamba-ssm-dtype", cfg.MambaSSMDType)
	}
	if cfg.Quantization != "" {
		r.add("--quantization", cfg.Quantization)
	}
}

func (r *renderer) speculative(cfg ServerConfig, spec *argspec.Spec) {
	s := cfg.Speculative
	if s == nil {
		return
	}
	algo := strings.ToUpper(strings.TrimSpace(s.Algorithm))
	if algo == "" {
		r.fail("Speculative.Algorithm is empty: name the speculative decoding algorithm, such as EAGLE3")
	} else if names, ok := spec.RuntimeChoices("--speculative-algorithm"); ok && !slices.Contains(names, algo) {
		r.fail("Speculative.Algorithm %q is not known to sglang %s; use one of %s", s.Algorithm, spec.Version(), strings.Join(names, ", "))
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"NumSteps", s.NumSteps}, {"EagleTopK", s.EagleTopK}, {"NumDraftTokens", s.NumDraftTokens}, {"DSparkBlockSize", s.DSparkBlockSize}} {
		if f.value < 0 {
			r.fail("Speculative.%s is %d; it must be positive, or 0 for the default", f.name, f.value)
		}
	}
	if s.DSparkBlockSize > 0 && algo != SpeculativeDSpark {
		r.fail("Speculative.DSparkBlockSize only applies to the %s algorithm, not %s", SpeculativeDSpark, algo)
	}
	r.add("--speculative-algorithm", algo)
	if s.DraftRevision != "" && s.DraftModelPath == "" {
		r.fail("Speculative.DraftRevision %q is set without DraftModelPath: without a draft path the release reads the draft from the model's checkpoint at its revision", s.DraftRevision)
	}
	if s.DraftModelPath != "" {
		r.add("--speculative-draft-model-path", s.DraftModelPath)
	}
	if s.DraftRevision != "" {
		r.add("--speculative-draft-model-revision", s.DraftRevision)
	}
	if s.NumSteps > 0 {
		r.addInt("--speculative-num-steps", s.NumSteps)
	}
	if s.EagleTopK > 0 {
		r.addInt("--speculative-eagle-topk", s.EagleTopK)
	}
	if s.NumDraftTokens > 0 {
		r.addInt("--speculative-num-draft-tokens", s.NumDraftTokens)
	}
	if s.DraftKVCacheDType != "" {
		r.add("--speculative-draft-kv-cache-dtype", s.DraftKVCacheDType)
	}
	if s.DSparkBlockSize > 0 {
		r.addInt("--speculative-dspark-block-size", s.DSparkBlockSize)
	}
}

func (r *renderer) disaggregation(cfg ServerConfig, spec *argspec.Spec) {
	d := cfg.Disaggregation
	if d == nil {
		return
	}
	switch d.Mode {
	case DisaggregationPrefill, DisaggregationDecode:
	default:
		r.fail("Disaggregation.Mode %q is neither %s nor %s", d.Mode, DisaggregationPrefill, DisaggregationDecode)
		return
	}
	r.add("--disaggregation-mode", d.Mode)
	if d.TransferBackend != "" {
		if names, ok := spec.Choices("--disaggregation-transfer-backend"); ok && !slices.Contains(names, d.TransferBackend) {
			r.fail("Disaggregation.TransferBackend %q is not known to sglang %s; use one of %s", d.TransferBackend, spec.Version(), strings.Join(names, ", "))
		}
		if d.TransferBackend == TransferFake && d.Mode == DisaggregationPrefill {
			r.fail("Disaggregation.TransferBackend fake moves no KV, and a prefill server refuses it")
		}
		r.add("--disaggregation-transfer-backend", d.TransferBackend)
	}
	if d.BootstrapPort != 0 {
		if d.BootstrapPort < 1 || d.BootstrapPort > 65535 {
			r.fail("Disaggregation.BootstrapPort %d is outside 1-65535", d.BootstrapPort)
		}
		r.addInt("--disaggregation-bootstrap-port", d.BootstrapPort)
	}
	if d.IBDevice != "" {
		r.add("--disaggregation-ib-device", d.IBDevice)
	}
	h := cfg.HiCache
	if s := cfg.Speculative; s != nil && cfg.PP > 1 && d.Mode != DisaggregationPrefill {
		r.fail("Speculative decoding (%s) with PP %d runs only on prefill servers; a decode server needs PP 1", s.Algorithm, cfg.PP)
	}
	switch {
	case d.Mode == DisaggregationPrefill:
		if d.DecodeL3 != "" {
			r.fail("Disaggregation.DecodeL3 only applies to decode servers")
		}
	case d.DecodeL3 == "":
		if h != nil {
			r.fail("a decode server without Disaggregation.DecodeL3 runs no hierarchical cache (it disables its radix cache): leave HiCache unset, or set DecodeL3")
		}
	case d.DecodeL3 == DecodeL3Offload:
		if h == nil || h.StorageBackend == "" {
			r.fail("Disaggregation.DecodeL3 offload writes to the storage backend: set HiCache with a StorageBackend")
		}
		r.add("--disaggregation-decode-enable-offload-kvcache")
	case d.DecodeL3 == DecodeL3HiCache:
		if h == nil {
			r.fail("Disaggregation.DecodeL3 hicache runs the hierarchical cache: set HiCache")
		}
		if s := cfg.Speculative; s != nil {
			switch strings.ToUpper(s.Algorithm) {
			case "EAGLE", "NEXTN", "EAGLE3", SpeculativeDSpark:
			default:
				r.fail("Disaggregation.DecodeL3 hicache needs the decode radix cache, which sglang %s refuses with the %s draft", spec.Version(), s.Algorithm)
			}
		}
		r.add("--disaggregation-decode-enable-radix-cache")
	default:
		r.fail("Disaggregation.DecodeL3 %q is none of %s, %s or empty", d.DecodeL3, DecodeL3Offload, DecodeL3HiCache)
	}
	if d.Mode == DisaggregationDecode && h != nil && h.HostMemoryMode == HostMemoryModeBufferOnly {
		r.fail("HiCache.HostMemoryMode buffer_only is refused on decode servers; use cache")
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (r *renderer) hicache(cfg ServerConfig) {
	h := cfg.HiCache
	if h == nil {
		return
	}
	mode := orDefault(h.HostMemoryMode, HostMemoryModeCache)
	write := orDefault(h.WritePolicy, WritePolicyWriteThrough)
	io := orDefault(h.IOBackend, IOBackendKernel)
	layout := orDefault(h.MemLayout, MemLayoutPageFirst)

	switch {
	case h.Ratio != 0 && h.SizeGB != 0:
		r.fail("HiCache.Ratio and HiCache.SizeGB are both set; the size would override the ratio, so set only one")
	case h.Ratio < 0 || h.SizeGB < 0:
		r.fail("HiCache.Ratio and HiCache.SizeGB must be positive")
	case h.Ratio != 0 && mode == HostMemoryModeCache && h.Ratio <= 1:
		r.fail("HiCache.Ratio is %g; in cache mode the host pool must be larger than the device pool, so use a ratio above 1", h.Ratio)
	}
	// Combinations the release accepts but silently rewrites at start. The
	// host layout decides the Mooncake keys, so refuse them instead.
	switch {
	case layout == MemLayoutPageFirstDirect && io == IOBackendKernel:
		r.fail("HiCache.MemLayout page_first_direct needs IOBackend direct; with kernel the server switches to direct on its own")
	case layout == MemLayoutPageFirst && io == IOBackendDirect:
		r.fail("HiCache.MemLayout page_first needs IOBackend kernel; with direct the server switches the layout to page_first_direct on its own")
	}
	if layout == MemLayoutLayerFirst && (h.StorageBackend == StorageBackendMooncake || h.StorageBackend == "npu_memcache") {
		r.fail("HiCache.MemLayout layer_first is not supported with the %s storage backend; the server would switch to a page_first layout, so choose page_first (kernel) or page_first_direct (direct)", h.StorageBackend)
	}
	if mode == HostMemoryModeBufferOnly {
		if h.StorageBackend == "" {
			r.fail("HiCache.HostMemoryMode buffer_only needs a StorageBackend: host memory only stages data on its way to storage")
		}
		if write == WritePolicyWriteBack {
			r.fail("HiCache.WritePolicy write_back does not apply to buffer_only (there is no host tier to write back from); use write_through")
		}
	}
	if len(h.ExtraConfig) > 0 && h.StorageBackend == "" {
		r.fail("HiCache.ExtraConfig is set without a StorageBackend to pass it to")
	}

	if d := cfg.Disaggregation; d == nil || d.DecodeL3 != DecodeL3Offload {
		// Decode offload builds its own host pool from these settings,
		// without the hierarchical cache.
		r.add("--enable-hierarchical-cache")
	}
	r.add("--hicache-host-memory-mode", mode)
	if h.Ratio != 0 {
		r.add("--hicache-ratio", strconv.FormatFloat(h.Ratio, 'g', -1, 64))
	}
	if h.SizeGB != 0 {
		r.addInt("--hicache-size", h.SizeGB)
	}
	r.add("--hicache-write-policy", write)
	r.add("--hicache-io-backend", io)
	r.add("--hicache-mem-layout", layout)
	if h.StorageBackend == "" {
		return
	}
	r.add("--hicache-storage-backend", h.StorageBackend)
	r.add("--hicache-storage-prefetch-policy", orDefault(h.PrefetchPolicy, PrefetchPolicyTimeout))
	if len(h.ExtraConfig) > 0 {
		payload, err := renderExtraConfig(h.ExtraConfig, max(cfg.TP, 1))
		if err != nil {
			r.errs = append(r.errs, err)
			return
		}
		r.add("--hicache-storage-backend-extra-config", payload)
	}
}

// renderExtraConfig writes the extra config as compact JSON with sorted
// keys and checks the keys SGLang itself reads, with the types it demands.
func renderExtraConfig(extra map[string]any, tp int) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(extra); err != nil {
		return "", fmt.Errorf("HiCache.ExtraConfig cannot be written as JSON: %w", err)
	}
	payload := strings.TrimSuffix(buf.String(), "\n")

	// Check what the server will read: the JSON, not the Go values.
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.UseNumber()
	var parsed map[string]any
	if err := dec.Decode(&parsed); err != nil {
		return "", fmt.Errorf("HiCache.ExtraConfig does not read back as a JSON object: %w", err)
	}
	var errs []error
	isInt := func(v any) (int64, bool) {
		n, ok := v.(json.Number)
		if !ok || strings.ContainsAny(n.String(), ".eE") {
			return 0, false
		}
		i, err := n.Int64()
		return i, err == nil
	}
	for key, want := range map[string]string{
		"prefetch_threshold":               "int",
		"tp_lcm_size":                      "int",
		"prefetch_timeout_base":            "number",
		"prefetch_timeout_per_ki_token":    "number",
		"hicache_storage_pass_prefix_keys": "bool",
	} {
		v, present := parsed[key]
		if !present {
			continue
		}
		ok := false
		switch want {
		case "int":
			_, ok = isInt(v)
		case "number":
			_, ok = v.(json.Number)
		case "bool":
			_, ok = v.(bool)
		}
		if !ok {
			errs = append(errs, fmt.Errorf("HiCache.ExtraConfig key %s must be a JSON %s, got %v", key, map[string]string{"int": "integer", "number": "number", "bool": "boolean"}[want], v))
		}
	}
	if v, ok := parsed["tp_lcm_size"]; ok {
		if n, isint := isInt(v); isint && (n <= 0 || n%int64(tp) != 0) {
			errs = append(errs, fmt.Errorf("HiCache.ExtraConfig tp_lcm_size %d must be a positive multiple of the TP size %d", n, tp))
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return payload, nil
}

func (r *renderer) extraArgs(cfg ServerConfig, spec *argspec.Spec) {
	if len(cfg.ExtraArgs) == 0 {
		return
	}
	// Unknown, refused and malformed flags, each with the spec field to use.
	if _, err := ClassifyExtraArgs(cfg.ExtraArgs); err != nil {
		r.errs = append(r.errs, err)
	}
	// A flag the configuration already rendered would be given twice, and
	// argparse would silently keep the extra one.
	rendered := map[string]bool{}
	own, _ := spec.Parse(r.args)
	for _, o := range own {
		rendered[o.Argument.Dest] = true
	}
	rules, _ := ArgRules()
	occ, _ := spec.Parse(cfg.ExtraArgs)
	for _, o := range occ {
		if rendered[o.Argument.Dest] && rules[o.Argument.Flags[0]].Class != ArgRefused {
			r.fail("spec.template.extraArgs sets %s, which the operator already renders from the spec; remove it", o.Flag)
		}
	}
	r.args = append(r.args, cfg.ExtraArgs...)
}
