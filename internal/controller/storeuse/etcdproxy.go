package storeuse

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/etcdtls"
	"github.com/hicache-io/hicache-operator/internal/store"
)

const (
	// etcdClientPort, etcdPeerPort and etcdMetricsPort are etcd's own defaults (the metrics
	// listener serves /health, /livez and /readyz besides /metrics).
	EtcdClientPort  = 2379
	EtcdPeerPort    = 2380
	EtcdMetricsPort = 2381
	// EtcdDataMount is where each member's volume is mounted; the data directory is inside it,
	// so that a file system's lost+found at the volume's root does not stop etcd.
	EtcdDataMount = "/var/lib/etcd"
	// EtcdBinary is where the default image and the upstream etcd images hold the server.
	EtcdBinary = "/usr/local/bin/etcd"
	// EtcdCompactionRetention bounds the history etcd keeps: the masters' metadata log writes a
	// key for every batch of puts and removals, and without compaction the database would grow
	// to its quota (2 GiB), after which etcd refuses writes and no leader can be elected.
	EtcdCompactionRetention = "10m"
	// EtcdTLSMount is where a member reads its certificates, etcdClientTLSMount where a proxy
	// reads the client certificate.
	EtcdTLSMount       = "/etc/etcd/tls"
	etcdClientTLSMount = "/etc/etcd/client"
	// etcdProxyPort is where the proxy listens, on the pod's loopback (the gRPC proxy's default).
	etcdProxyPort = 23790
	// AnnotationEtcdCA names the CA a pod's etcd or proxy was started with: a new CA rolls the
	// pods (etcd reads its trusted CA once; the leaves it reads again at every handshake).
	AnnotationEtcdCA = "hicache.io/etcd-ca"
)

// etcdProxyAddress is what a pod with the proxy is given as its etcd.
var etcdProxyAddress = fmt.Sprintf("127.0.0.1:%d", etcdProxyPort)

// ManagedEtcd is the managed etcd of a backend, nil when it runs none.
func ManagedEtcd(cb *hicachev1alpha1.CacheBackend) *hicachev1alpha1.ManagedEtcd {
	if ha := ManagedHA(cb); ha != nil {
		return ha.Etcd.Managed
	}
	return nil
}

// EtcdName is the StatefulSet of a backend's etcd and its client Service.
func EtcdName(cb string) string { return cb + "-etcd" }

// EtcdTLSName is the Secret of the etcd's certificates.
func EtcdTLSName(cb string) string { return cb + "-etcd-tls" }

// ManagedEtcdEndpoints are the client endpoints of a backend's managed etcd: its client Service,
// which reaches the Ready members.
func ManagedEtcdEndpoints(cb *hicachev1alpha1.CacheBackend) []string {
	return []string{fmt.Sprintf("%s.%s.svc:%d", EtcdName(cb.Name), cb.Namespace, EtcdClientPort)}
}

// EtcdSecretVolume is the etcd's Secret as a volume of the CA certificate and the given items.
// The files are readable by any user of the pod: the pods of the masters, the stores and the
// ranks set no fsGroup, and their proxy runs as a user that does not own them. Only the items
// named are there, never the CA's key.
func EtcdSecretVolume(cb *hicachev1alpha1.CacheBackend, name string, keys ...string) corev1.Volume {
	items := []corev1.KeyToPath{{Key: etcdtls.KeyCACert, Path: etcdtls.KeyCACert}}
	for _, k := range keys {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: EtcdTLSName(cb.Name), Items: items, DefaultMode: ptr.To(int32(0o444))}}}
}

// ManagedEtcdImage is the image of a backend's managed etcd: its members and the proxies.
func ManagedEtcdImage(cb *hicachev1alpha1.CacheBackend, def string) string {
	if e := ManagedEtcd(cb); e != nil && e.Image != "" {
		return e.Image
	}
	return def
}

// EtcdProxyContainer is etcd's gRPC proxy as a sidecar (an init container that keeps running,
// started before the pod's containers): plaintext on the pod's loopback, mutual TLS with the
// client certificate to the client Service. It writes nothing, and needs a few MiB.
func EtcdProxyContainer(cb *hicachev1alpha1.CacheBackend, image string) corev1.Container {
	_, sec := RestrictedSecurity()
	sec.ReadOnlyRootFilesystem = ptr.To(true)
	return corev1.Container{
		Name:    "etcd-proxy",
		Image:   image,
		Command: []string{EtcdBinary},
		Args: []string{"grpc-proxy", "start",
			fmt.Sprintf("--endpoints=https://%s", ManagedEtcdEndpoints(cb)[0]),
			"--cert=" + etcdClientTLSMount + "/" + etcdtls.KeyClientCert,
			"--key=" + etcdClientTLSMount + "/" + etcdtls.KeyClientKey,
			"--cacert=" + etcdClientTLSMount + "/" + etcdtls.KeyCACert,
			"--listen-addr=" + etcdProxyAddress,
			// The proxy dials its own advertised address: the loopback one.
			"--advertise-client-url=" + etcdProxyAddress,
		},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext: sec,
		VolumeMounts:    []corev1.VolumeMount{{Name: "etcd-client-tls", MountPath: etcdClientTLSMount, ReadOnly: true}},
	}
}

// AddEtcdProxyWithCA gives a pod of a backend with a managed etcd the proxy and the client
// certificate; a pod of any other backend is left as it is. caFingerprint names the CA, so that
// a new one restarts the pod ("" leaves the pod unannotated).
func AddEtcdProxyWithCA(tmpl *corev1.PodTemplateSpec, cb *hicachev1alpha1.CacheBackend, image, caFingerprint string) {
	if cb == nil || ManagedEtcd(cb) == nil {
		return
	}
	tmpl.Spec.InitContainers = append([]corev1.Container{EtcdProxyContainer(cb, image)}, tmpl.Spec.InitContainers...)
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, EtcdSecretVolume(cb, "etcd-client-tls", etcdtls.KeyClientCert, etcdtls.KeyClientKey))
	if caFingerprint != "" {
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[AnnotationEtcdCA] = caFingerprint
	}
}

// EtcdProxyAddress is the address a pod that runs the proxy to a managed etcd gives its
// Mooncake client: etcd://127.0.0.1:23790.
var EtcdProxyAddress = etcdAddress([]string{etcdProxyAddress})

// AddEtcdProxy gives a pod template of one's own the proxy to cb's managed etcd and the client
// certificate, as the operator gives its own pods: the pod's Mooncake client is then given
// EtcdProxyAddress. The pod must carry the backend's label (hicache.io/backend) for the etcd's
// NetworkPolicy to admit it. A backend without a managed etcd leaves the template as it is.
func AddEtcdProxy(tmpl *corev1.PodTemplateSpec, cb *hicachev1alpha1.CacheBackend, image string) {
	AddEtcdProxyWithCA(tmpl, cb, ManagedEtcdImage(cb, image), "")
}

// PodRPCAddress is the RPC address a pod of the backend is given: with a managed etcd the
// proxy beside it (etcd://127.0.0.1:23790), else the address clients use (managedRPCAddress, or
// an external backend's).
func PodRPCAddress(cb *hicachev1alpha1.CacheBackend, rpcAddress string) string {
	if cb != nil && ManagedEtcd(cb) != nil && store.IsEtcd(rpcAddress) {
		return EtcdProxyAddress
	}
	return rpcAddress
}

// HaClientEndpoints are the etcd endpoints the masters are given: the proxy beside them for a
// managed etcd, else the spec's.
func HaClientEndpoints(cb *hicachev1alpha1.CacheBackend) []string {
	if ManagedEtcd(cb) != nil {
		return []string{etcdProxyAddress}
	}
	return HaEtcdEndpoints(cb)
}
