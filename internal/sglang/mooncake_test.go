package sglang

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMooncakeExtraConfig(t *testing.T) {
	cases := map[string]struct {
		in   MooncakeConfig
		want map[string]any
	}{
		"defaults are written out": {
			in: MooncakeConfig{MasterServerAddress: "mooncake-master:50051"},
			want: map[string]any{
				"master_server_address": "mooncake-master:50051", "metadata_server": "P2PHANDSHAKE",
				"global_segment_size": int64(0), "protocol": "tcp", "device_name": "", "master_metrics_port": 9003,
			},
		},
		"everything set": {
			in: MooncakeConfig{
				MasterServerAddress: "10.0.0.1:50051", MetadataServer: "http://meta:8080/metadata", GlobalSegmentSize: 4 << 30,
				Protocol: "rdma", DeviceName: "mlx5_0,mlx5_1", TenantID: "team-a", ExtraBackendTag: "v2",
				MasterMetricsPort: 9100, LocalHostname: "$(POD_IP)", PrefetchThreshold: 512, TPLCMSize: 8,
			},
			want: map[string]any{
				"master_server_address": "10.0.0.1:50051", "metadata_server": "http://meta:8080/metadata",
				"global_segment_size": int64(4 << 30), "protocol": "rdma", "device_name": "mlx5_0,mlx5_1",
				"master_metrics_port": 9100, "tenant_id": "team-a", "extra_backend_tag": "v2",
				"prefetch_threshold": 512, "tp_lcm_size": 8,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := MooncakeExtraConfig(tc.in)
			if err != nil {
				t.Fatalf("MooncakeExtraConfig: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("extra config (-want +got):\n%s", diff)
			}
			if _, leaked := got["local_hostname"]; leaked {
				t.Error("local_hostname belongs in the environment, not the shared extra config")
			}
		})
	}
}

func TestMooncakeConfigErrors(t *testing.T) {
	cases := map[string]struct {
		in   MooncakeConfig
		want []string
	}{
		"no master":         {in: MooncakeConfig{}, want: []string{"MasterServerAddress is empty"}},
		"master no port":    {in: MooncakeConfig{MasterServerAddress: "master"}, want: []string{`"master" is not host:port`}},
		"etcd without port": {in: MooncakeConfig{MasterServerAddress: "etcd://e1:2379;e2"}, want: []string{`names the etcd endpoint "e2", which is not host:port`}},
		"negative segment":  {in: MooncakeConfig{MasterServerAddress: "m:1", GlobalSegmentSize: -1}, want: []string{"GlobalSegmentSize is -1"}},
		"unknown protocol":  {in: MooncakeConfig{MasterServerAddress: "m:1", Protocol: "carrier-pigeon"}, want: []string{`Protocol "carrier-pigeon"`, "rdma, tcp"}},
		"bad metrics port":  {in: MooncakeConfig{MasterServerAddress: "m:1", MasterMetricsPort: 70000}, want: []string{"MasterMetricsPort 70000"}},
		"negative tuning":   {in: MooncakeConfig{MasterServerAddress: "m:1", PrefetchThreshold: -1, TPLCMSize: -2}, want: []string{"PrefetchThreshold is -1", "TPLCMSize is -2"}},
		"several at a time": {in: MooncakeConfig{Protocol: "x", MasterMetricsPort: -1}, want: []string{"MasterServerAddress is empty", `Protocol "x"`, "MasterMetricsPort -1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for fn, f := range map[string]func(MooncakeConfig) error{
				"MooncakeExtraConfig": func(m MooncakeConfig) error { _, err := MooncakeExtraConfig(m); return err },
				"Env":                 func(m MooncakeConfig) error { _, err := Env(m); return err },
			} {
				err := f(tc.in)
				if err == nil {
					t.Fatalf("%s accepted %+v", fn, tc.in)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s error %q does not mention %q", fn, err, w)
					}
				}
			}
		})
	}
}

func TestEnv(t *testing.T) {
	cases := map[string]struct {
		in   MooncakeConfig
		want []EnvVar
	}{
		"pure client": {
			in: MooncakeConfig{MasterServerAddress: "m:50051"},
			want: []EnvVar{
				{"MOONCAKE_GLOBAL_SEGMENT_SIZE", "0"}, {"MOONCAKE_MASTER", "m:50051"},
				{"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "tcp"},
				{"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
		"whole GiB segment and per-pod hostname": {
			in: MooncakeConfig{MasterServerAddress: "m:50051", GlobalSegmentSize: 4 << 30, Protocol: "rdma", DeviceName: "mlx5_0", TenantID: "a", LocalHostname: "$(POD_IP)"},
			want: []EnvVar{
				{"MOONCAKE_DEVICE", "mlx5_0"}, {"MOONCAKE_GLOBAL_SEGMENT_SIZE", "4gb"}, {"MOONCAKE_LOCAL_HOSTNAME", "$(POD_IP)"},
				{"MOONCAKE_MASTER", "m:50051"}, {"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "rdma"},
				{"MOONCAKE_TENANT_ID", "a"}, {"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
		"HA masters through etcd: the cluster id, and deadlines that end a ping to a dead leader": {
			in: MooncakeConfig{MasterServerAddress: "etcd://mc-etcd.ns.svc:2379", ClusterID: "ns.mc"},
			want: []EnvVar{
				{"MC_RPC_CONNECT_TIMEOUT_MS", "3000"}, {"MC_RPC_TIMEOUT_MS", "10000"},
				{"MC_STORE_CLUSTER_ID", "ns.mc"}, {"MOONCAKE_GLOBAL_SEGMENT_SIZE", "0"}, {"MOONCAKE_MASTER", "etcd://mc-etcd.ns.svc:2379"},
				{"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "tcp"},
				{"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
		"HA masters on two etcd members": {
			in: MooncakeConfig{MasterServerAddress: "etcd://e1:2379;e2:2379", ClusterID: "c"},
			want: []EnvVar{
				{"MC_RPC_CONNECT_TIMEOUT_MS", "3000"}, {"MC_RPC_TIMEOUT_MS", "10000"},
				{"MC_STORE_CLUSTER_ID", "c"}, {"MOONCAKE_GLOBAL_SEGMENT_SIZE", "0"}, {"MOONCAKE_MASTER", "etcd://e1:2379;e2:2379"},
				{"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "tcp"},
				{"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
		"a lone master named etcd keeps the release's deadlines": {
			in: MooncakeConfig{MasterServerAddress: "etcd:50051"},
			want: []EnvVar{
				{"MOONCAKE_GLOBAL_SEGMENT_SIZE", "0"}, {"MOONCAKE_MASTER", "etcd:50051"},
				{"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "tcp"},
				{"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
		"partial GiB segment in bytes": {
			in: MooncakeConfig{MasterServerAddress: "m:50051", GlobalSegmentSize: 3 << 29},
			want: []EnvVar{
				{"MOONCAKE_GLOBAL_SEGMENT_SIZE", "1610612736"}, {"MOONCAKE_MASTER", "m:50051"},
				{"MOONCAKE_MASTER_METRICS_PORT", "9003"}, {"MOONCAKE_PROTOCOL", "tcp"},
				{"MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Env(tc.in)
			if err != nil {
				t.Fatalf("Env: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGlobalSegmentSize(t *testing.T) {
	tests := map[string]struct {
		perRank    int64
		attnTP, pp int
		want       int64
		wantErr    bool
	}{
		// SGLang 0.5.23 mounts global_segment_size // (tp_size × pp_size) on each rank.
		"TP4: 4 GiB per rank renders 16 GiB": {perRank: 4 << 30, attnTP: 4, pp: 1, want: 16 << 30},
		"TP2 PP2":                            {perRank: 1 << 30, attnTP: 2, pp: 2, want: 4 << 30},
		"TP16 DeepSeek-V4":                   {perRank: 32 << 20, attnTP: 16, pp: 1, want: 512 << 20},
		"single rank":                        {perRank: 123, attnTP: 1, pp: 1, want: 123},
		"pure client":                        {perRank: 0, attnTP: 8, pp: 2, want: 0},
		"overflow":                           {perRank: math.MaxInt64 / 2, attnTP: 4, pp: 1, wantErr: true},
		"no ranks":                           {perRank: 1, attnTP: 0, pp: 1, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := GlobalSegmentSize(tc.perRank, tc.attnTP, tc.pp)
			if (err != nil) != tc.wantErr {
				t.Fatalf("GlobalSegmentSize = %d, %v; want error %v", got, err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("GlobalSegmentSize = %d, want %d", got, tc.want)
			}
			if !tc.wantErr && tc.perRank > 0 && got/int64(tc.attnTP*tc.pp) != tc.perRank {
				t.Errorf("SGLang would mount %d bytes per rank, want %d", got/int64(tc.attnTP*tc.pp), tc.perRank)
			}
		})
	}
}
