package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hicache-io/hicache-operator/internal/mooncake"
	"github.com/hicache-io/hicache-operator/internal/mooncake/mooncaketest"
)

// master is a real mooncake_master on loopback, for one test.
type master struct {
	*mooncaketest.Master
	admin *mooncake.Client
}

func startMaster(t *testing.T) *master {
	t.Helper()
	m := mooncaketest.Start(t)
	c, err := mooncake.NewClient(m.AdminURL, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &master{Master: m, admin: c}
}

func (m *master) putKeys(t *testing.T, keys []string, size int) { t.Helper(); m.PutKeys(t, keys, size) }

func (m *master) countKeys(prefix string) (int64, error) {
	return m.admin.CountKeysWithPrefix(context.Background(), prefix)
}

func (m *master) stop(t *testing.T)    { t.Helper(); m.Stop() }
func (m *master) restart(t *testing.T) { t.Helper(); m.Restart() }
