package controllers

import (
	"context"
	"net/http"

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
