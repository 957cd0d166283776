package textgenapp

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
)

// limitStores pools the Redis limits stores by URL, so that every module of a config (the API
// handler, My Account) and a reload share one client and one view of whether Redis answers.
// Preparing a store connects to nothing (the first limit check does), so modules take their
// share in Provision, and `caddy validate` opens no connection.
var limitStores = caddy.NewUsagePool()

type pooledStore struct{ *ratelimit.Shared }

func (p pooledStore) Destruct() error { return p.Close() }

// LimitsStore returns a share of the Redis limits store spec names (redis://, rediss:// or
// unix://; placeholders such as {env.TEXTGEN_REDIS_URL} are resolved here, so a password never
// appears in the config JSON). Release the share with ReleaseLimitsStore(key).
func LimitsStore(spec string, log *zap.Logger) (s *ratelimit.Shared, key string, err error) {
	key = strings.TrimSpace(caddy.NewReplacer().ReplaceAll(spec, ""))
	if key == "" {
		return nil, "", fmt.Errorf("limits_store: a redis:// URL is required (a placeholder resolved to nothing)")
	}
	if !strings.HasPrefix(key, "redis://") && !strings.HasPrefix(key, "rediss://") && !strings.HasPrefix(key, "unix://") {
		return nil, "", fmt.Errorf("limits_store %s: want a redis://, rediss:// or unix:// URL", ratelimit.Redact(key))
	}
	v, _, err := limitStores.LoadOrNew(key, func() (caddy.Destructor, error) {
		s, err := ratelimit.OpenShared(key, ratelimit.SharedOptions{Logger: log})
		if err != nil {
			return nil, err
		}
		return pooledStore{s}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(pooledStore).Shared, key, nil
}

// ReleaseLimitsStore lets go of a share taken by LimitsStore; the last closes the client.
func ReleaseLimitsStore(key string) { _, _ = limitStores.Delete(key) }

// OpenLimitStores lists the limits stores in use, for metrics.
func OpenLimitStores() []*ratelimit.Shared {
	var out []*ratelimit.Shared
	limitStores.Range(func(_, v any) bool {
		out = append(out, v.(pooledStore).Shared)
		return true
	})
	return out
}
