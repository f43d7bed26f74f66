package localcluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// GPUResource is the extended resource the fake nodes offer, as NVIDIA's device plugin
	// names it.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUProductLabel carries the GPU model, as NVIDIA's GPU feature discovery names it.
	GPUProductLabel = "nvidia.com/gpu.product"
	// GPUCountLabel carries the number of GPUs, as NVIDIA's GPU feature discovery names it.
	GPUCountLabel = "nvidia.com/gpu.count"
	// DefaultGPUProduct is the GPUProductLabel value of nodes that do not choose one.
	DefaultGPUProduct = "NVIDIA-H100-80GB-HBM3"

	// KwokNodeAnnotation marks the nodes kwok manages (its --manage-nodes-with-annotation-selector).
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	kwokNodeValue      = "fake"
	// FakeNodeLabel is set to "kwok" on every fake node, so they can be selected.
	FakeNodeLabel = "type"
)

// NodeSpec describes one fake node. Zero fields take the defaults named on them.
//
// Fake nodes carry no taint: every node of the local cluster is fake, so pods need no
// toleration to run on them.
type NodeSpec struct {
	// Name of the node; required.
	Name string
	// GPUs is the nvidia.com/gpu capacity; 0 means a node without GPUs.
	GPUs int64
	// GPUProduct is the nvidia.com/gpu.product label; empty means DefaultGPUProduct (when GPUs > 0).
	GPUProduct string
	// CPU capacity; zero means 64.
	CPU resource.Quantity
	// Memory capacity; zero means 512Gi.
	Memory resource.Quantity
	// Pods is the pod capacity; 0 means 110.
	Pods int64
	// InternalIP is the node's address; empty means one from 10.1.0.0/16 by position.
	InternalIP string
	// Labels are added to the node's labels (and override them).
	Labels map[string]string
	// Taints are put on the node.
	Taints []corev1.Taint
}

// GPUNodes describes count nodes gpu-node-0 … gpu-node-<count-1>, each with gpus GPUs,
// 64 CPUs and 512Gi of memory.
func GPUNodes(count int, gpus int64) []NodeSpec {
	nodes := make([]NodeSpec, count)
	for i := range nodes {
		nodes[i] = NodeSpec{Name: fmt.Sprintf("gpu-node-%d", i), GPUs: gpus}
	}
	return nodes
}

// DefaultNodes is what Start creates when Options.Nodes is empty: four nodes with eight GPUs each.
func DefaultNodes() []NodeSpec { return GPUNodes(4, 8) }

// Node builds the Node object for the spec; index picks the default InternalIP.
func (s NodeSpec) Node(index int) *corev1.Node {
	cpu := s.CPU
	if cpu.IsZero() {
		cpu = resource.MustParse("64")
	}
	memory := s.Memory
	if memory.IsZero() {
		memory = resource.MustParse("512Gi")
	}
	pods := s.Pods
	if pods == 0 {
		pods = 110
	}
	ip := s.InternalIP
	if ip == "" {
		ip = fmt.Sprintf("10.1.%d.%d", index/250, index%250+1)
	}

	labels := map[string]string{
		corev1.LabelHostname:   s.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		FakeNodeLabel:          "kwok",
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    cpu,
		corev1.ResourceMemory: memory,
		corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
	}
	if s.GPUs > 0 {
		product := s.GPUProduct
		if product == "" {
			product = DefaultGPUProduct
		}
		labels["nvidia.com/gpu.present"] = "true"
		labels[GPUProductLabel] = product
		labels[GPUCountLabel] = strconv.FormatInt(s.GPUs, 10)
		resources[GPUResource] = *resource.NewQuantity(s.GPUs, resource.DecimalSI)
	}
	for k, v := range s.Labels {
		labels[k] = v
	}

	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: kwokNodeValue},
		},
		Spec: corev1.NodeSpec{Taints: append([]corev1.Taint(nil), s.Taints...)},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeHostName, Address: s.Name},
			},
		},
	}
}

// createNodes creates the nodes; a node that already exists (a reused Dir) is kept.
func (c *Cluster) createNodes(ctx context.Context, specs []NodeSpec) error {
	seen := map[string]bool{}
	for i, spec := range specs {
		if spec.Name == "" {
			return fmt.Errorf("node %d has no name: every NodeSpec needs one", i)
		}
		if seen[spec.Name] {
			return fmt.Errorf("two nodes are named %q: node names must be unique", spec.Name)
		}
		seen[spec.Name] = true
		_, err := c.client.CoreV1().Nodes().Create(ctx, spec.Node(i), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", spec.Name, err)
		}
		c.nodes = append(c.nodes, spec.Name)
	}
	return nil
}

// waitNodesReady waits until every created node is Ready and has lost the taints the node
// lifecycle controller puts on nodes that are not (yet) Ready.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	var pending []string
	err := wait.PollUntilContextCancel(ctx, 2*pollEvery, true, func(ctx context.Context) (bool, error) {
		if err := c.checkComponents(); err != nil {
			return false, err
		}
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // the API server may be briefly busy; keep polling until the deadline
		}
		byName := map[string]*corev1.Node{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		pending = pending[:0]
		for _, name := range c.nodes {
			if why := nodeNotReady(byName[name]); why != "" {
				pending = append(pending, name+" ("+why+")")
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil && ctx.Err() != nil {
		sort.Strings(pending)
		return fmt.Errorf("nodes did not become Ready in time: %s; see kwok.log and kube-controller-manager.log in %s", strings.Join(pending, ", "), c.LogDir())
	}
	return err
}

// nodeNotReady says why a node cannot take pods yet, or "" when it can.
func nodeNotReady(n *corev1.Node) string {
	if n == nil {
		return "missing"
	}
	ready := corev1.ConditionUnknown
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status
		}
	}
	if ready != corev1.ConditionTrue {
		return "Ready is " + string(ready)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return "tainted " + t.Key
		}
	}
	return ""
}
