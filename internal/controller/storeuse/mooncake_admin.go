package storeuse

import (
	"context"
	"math"
	"net"
	"net/http"
	"strconv"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
	"github.com/hicache-io/hicache-operator/internal/mooncake"
)

// mooncakeAdmin is StoreAdmin over the Mooncake master's admin HTTP API.
type mooncakeAdmin struct {
	HTTP *http.Client
}

func (m mooncakeAdmin) client(adminURL string) (*mooncake.Client, error) {
	return mooncake.NewClient(adminURL, m.HTTP)
}

// Probe asks /health, then /metrics for capacity and key count, and keeps only what it parsed:
// the health state as one of the known states, and numbers. Both requests share ctx's deadline.
func (m mooncakeAdmin) Probe(ctx context.Context, adminURL string) (BackendProbe, error) {
	c, err := m.client(adminURL)
	if err != nil {
		return BackendProbe{}, err
	}
	h, err := c.Health(ctx)
	if err != nil {
		return BackendProbe{}, err
	}
	state := h.State()
	p := BackendProbe{ServiceReady: state == mooncake.HealthServing, Standby: state == mooncake.HealthStandby}
	mh := MasterHealthOf(h)
	p.Leader, p.ViewVersion = mh.Leader, mh.ViewVersion
	s, err := c.Summary(ctx)
	if err != nil {
		return BackendProbe{}, err
	}
	p.KeyCount, p.CapacityBytes, p.UsedBytes, p.SegmentCount = s.KeyCount, s.CapacityBytes, s.UsedBytes, s.SegmentCount
	return p, nil
}

// RemoveAll removes every object, or one tenant's.
func (m mooncakeAdmin) RemoveAll(ctx context.Context, adminURL string, force bool, tenant string) (int64, error) {
	c, err := m.client(adminURL)
	if err != nil {
		return 0, err
	}
	return c.RemoveAll(ctx, mooncake.RemoveAllOptions{Force: force, TenantID: tenant})
}

// CountKeys counts the objects under a key prefix.
func (m mooncakeAdmin) CountKeys(ctx context.Context, adminURL, prefix string) (int64, error) {
	c, err := m.client(adminURL)
	if err != nil {
		return 0, err
	}
	return c.CountKeysWithPrefix(ctx, prefix)
}

// MasterHealth asks /health and keeps the role as one of the known roles, and the leader's
// address only when it is host:port.
func (m mooncakeAdmin) MasterHealth(ctx context.Context, adminURL string) (MasterHealth, error) {
	c, err := m.client(adminURL)
	if err != nil {
		return MasterHealth{}, err
	}
	h, err := c.Health(ctx)
	if err != nil {
		return MasterHealth{}, err
	}
	return MasterHealthOf(h), nil
}

// MasterHealthOf classifies a /health answer.
func MasterHealthOf(h mooncake.Health) MasterHealth {
	out := MasterHealth{Role: hicachev1alpha1.MasterStarting, Leader: hostPortOnly(h.LeaderAddress)}
	switch h.State() {
	case mooncake.HealthServing:
		out.Role = hicachev1alpha1.MasterLeader
	case mooncake.HealthStandby:
		out.Role = hicachev1alpha1.MasterStandby
	}
	if h.ViewVersion != nil && *h.ViewVersion <= math.MaxInt64 {
		out.ViewVersion = int64(*h.ViewVersion)
	}
	return out
}

// hostPortOnly is addr when it is host:port with a host of address characters only, else "": the
// leader address is the server's text, shown in status.
func hostPortOnly(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || len(addr) > 256 {
		return ""
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return ""
	}
	for _, r := range host {
		if !(r == '.' || r == '-' || r == ':' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return ""
		}
	}
	return net.JoinHostPort(host, port)
}
