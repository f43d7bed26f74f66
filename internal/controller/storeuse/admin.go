package storeuse

import (
	"context"

	hicachev1alpha1 "github.com/hicache-io/hicache-operator/api/v1alpha1"
)

// BackendProbe is what a store's admin API reported: only what was parsed from it (numbers and
// known states), never its text, because it is shown to whoever reads the CacheBackend and the
// admin URL can name any server the operator reaches.
type BackendProbe struct {
	// ServiceReady is the master's own readiness.
	ServiceReady bool
	// Standby is true when the master is an HA standby, which answers but does not serve.
	Standby bool
	// KeyCount, CapacityBytes and UsedBytes describe the store as a whole.
	KeyCount, CapacityBytes, UsedBytes int64
	// SegmentCount is the number of memory segments mounted in the store.
	SegmentCount int64
	// Leader is the HA leader's RPC address (host:port) the master names, ViewVersion its view;
	// empty and 0 without HA.
	Leader      string
	ViewVersion int64
}

// StoreAdmin is what the operator asks of a store's admin API. Its errors never quote what the
// store answered: they reach status.
type StoreAdmin interface {
	// Probe reports health and capacity.
	Probe(ctx context.Context, adminURL string) (BackendProbe, error)
	// RemoveAll removes every object (of one tenant, when tenant is set).
	RemoveAll(ctx context.Context, adminURL string, force bool, tenant string) (removed int64, err error)
	// CountKeys counts the objects whose key starts with prefix ("" counts all).
	CountKeys(ctx context.Context, adminURL, prefix string) (int64, error)
	// MasterHealth asks one master its HA role.
	MasterHealth(ctx context.Context, adminURL string) (MasterHealth, error)
}

// MasterHealth is what one master says of itself: only known roles and a parsed address.
type MasterHealth struct {
	// Role is Leader (serving), Standby, or Starting (elected and warming up, or neither).
	Role hicachev1alpha1.MasterRole
	// Leader is the leader's RPC address as host:port, "" when the master names none or names
	// something that is not one.
	Leader string
	// ViewVersion is the masters' leader view, 0 without HA.
	ViewVersion int64
}
