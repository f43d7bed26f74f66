package localcluster

import (
	"fmt"
	"strings"
)

// nodeLayout is where one real node keeps its files and which addresses it has. Every path
// is under dir (<Cluster.Dir>/node), so that the node's processes are found by
// ProcessesUsing(Cluster.Dir) and its files go with the cluster directory.
type nodeLayout struct {
	name       string
	dir        string
	netns      string
	nodeIP     string
	cgroupRoot string
	// apiServer is the API server as the node reaches it: https://<nodeIP>:<port>.
	apiServer string
}

func (l nodeLayout) path(parts ...string) string {
	return strings.Join(append([]string{l.dir}, parts...), "/")
}

func (l nodeLayout) containerdSocket() string { return l.path("containerd", "containerd.sock") }
func (l nodeLayout) pki(name string) string   { return l.path("pki", name) }

// containerdConfig is containerd 1.6's configuration for a registry-less node with a cgroup
// v1 (cgroupfs) kubelet: private root, state, socket and runc root, so that nothing is
// shared with a containerd the host may run.
func containerdConfig(l nodeLayout) string {
	return fmt.Sprintf(`# containerd 1.6 configuration of the local cluster's real node.
version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    stream_server_address = "127.0.0.1"
    # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj (sandboxes ask for -998) and
    # every sandbox fails with "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    # Pods' network namespaces under the state directory, not /run/netns: they go with it.
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[6]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %[7]q
  [plugins."io.containerd.internal.v1.opt"]
    path = %[8]q
`, l.path("containerd", "root"), l.path("containerd", "state"), l.containerdSocket(), l.containerdSocket()+".ttrpc",
		SandboxImage, l.path("containerd", "runc"), l.path("cni", "net.d"), l.path("containerd", "opt"))
}

// cniConfig is the bridge network of the node's pods, with hairpin for a pod reaching
// itself through a Service.
func cniConfig(l nodeLayout) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, RealNodePodCIDR, l.path("cni", "ipam"))
}

// kubeletConfig is the kubelet's configuration for this host: cgroup v1 with cgroupfs, no
// CAP_SYS_RESOURCE, pods under a cgroup root of their own, the node's taint at registration.
func kubeletConfig(l nodeLayout) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The default refuses cgroup v1 since 1.35; hosts like this one are cgroup v1 (hybrid).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[3]s
healthzPort: 10248
tlsCertFile: %[4]s
tlsPrivateKeyFile: %[5]s
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization: {mode: Webhook}
clusterDNS: [%[7]s]
clusterDomain: cluster.local
resolvConf: %[8]s
failSwapOn: false
podLogsDir: %[9]s
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 50
# Without CAP_SYS_RESOURCE the kubelet cannot lower its own oom_score_adj.
oomScoreAdj: 0
registerWithTaints:
- {key: %[10]s, effect: NoSchedule}
`, l.cgroupRoot, l.containerdSocket(), l.nodeIP, l.pki("kubelet-serving.crt"), l.pki("kubelet-serving.key"),
		l.pki("ca.crt"), KubeDNSServiceIP, l.path("resolv.conf"), l.path("pod-logs"), RealNodeTaintKey)
}

// kubeProxyConfig runs kube-proxy in iptables mode inside the node's network namespace; it
// leaves the host's conntrack sysctls alone.
func kubeProxyConfig(l nodeLayout) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: %[1]s
clientConnection: {kubeconfig: %[2]s}
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: %[4]s:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false}
`, l.name, l.path("kube-proxy.kubeconfig"), RealNodePodCIDR, l.nodeIP)
}

// corefile serves the cluster domain only: names outside it are refused rather than
// forwarded, so no query leaves the node's network namespace.
func corefile(l nodeLayout) string {
	return fmt.Sprintf(`cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    health %[1]s:8080
    ready %[1]s:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
    loop
    reload
}
`, l.nodeIP, l.path("coredns.kubeconfig"))
}
