package badgerledger

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// The space guard keeps the ledger from filling its disk. Badger writes its log files through
// memory-mapped, sparse files: a write to a page the file system cannot place is not an error
// but a SIGBUS that kills the whole Caddy process, and it kills it again at every start until
// space is freed. So the store keeps a reserve, as etcd's NOSPACE alarm does:
//
//   - below the reserve, the alarm is raised: new work (holds, grants, keys, accounts,
//     sessions, Idempotency-Keys) is refused with ErrUnavailable before anything changes in
//     memory, while holds already taken are still settled or voided, and keys revoked, within
//     the reserve;
//   - the free space is checked every SpaceCheckInterval and before every commit; below a
//     quarter of the reserve (another program filled the disk faster than the checks), the
//     committer waits for space instead of writing;
//   - the alarm is lowered, and the store takes work again, as soon as space is back.

// errNoStatfs: this system has no statfs (the guard is off).
var errNoStatfs = errors.New("statfs is not available")

// minReserve and maxReserve bound the default reserve (5% of the file system).
const (
	minReserve = 32 << 20
	maxReserve = 256 << 20
)

// spaceGuard watches the free space of the ledger's file system.
type spaceGuard struct {
	dir     string
	reserve int64 // bytes; 0: off
	log     *zap.Logger
	// low is the reason the alarm is raised, nil while there is space.
	low  atomic.Pointer[string]
	mu   sync.Mutex // orders checks, so transitions are logged once
	free func(dir string) (free, total int64, err error)
}

// newSpaceGuard resolves the reserve for dir (want: Options.SpaceReserve) and checks once.
func newSpaceGuard(dir string, want int64, log *zap.Logger) (*spaceGuard, error) {
	g := &spaceGuard{dir: dir, log: log, free: fsSpace}
	if want < 0 || dir == "" {
		return g, nil
	}
	free, total, err := g.free(dir)
	if err != nil {
		if err == errNoStatfs {
			log.Warn("the ledger cannot check its disk's free space on this system; keep it from filling up", zap.String("dir", dir))
			return g, nil
		}
		return nil, fmt.Errorf("checking the free space of %s: %w", dir, err)
	}
	g.reserve = want
	if want == 0 {
		g.reserve = min(max(total/20, minReserve), maxReserve)
	}
	g.update(free)
	return g, nil
}

// err is nil while there is space, else an error wrapping ErrUnavailable that says why.
func (g *spaceGuard) err() error {
	if r := g.low.Load(); r != nil {
		return fmt.Errorf("%w: %s", ledger.ErrDiskFull, *r)
	}
	return nil
}

// check reads the free space and raises or lowers the alarm. It returns the free bytes (-1 when
// they could not be read).
func (g *spaceGuard) check() int64 {
	if g.reserve <= 0 {
		return -1
	}
	free, _, err := g.free(g.dir)
	if err != nil {
		g.log.Warn("checking the ledger's free disk space failed", zap.Error(err))
		return -1
	}
	g.update(free)
	return free
}

func (g *spaceGuard) update(free int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.low.Load() != nil
	if free < g.reserve {
		r := fmt.Sprintf("the ledger's disk has %s free, below its reserve of %s (%s); new work is refused until space is freed",
			mib(free), mib(g.reserve), g.dir)
		g.low.Store(&r)
		if !was {
			g.log.Error("ledger disk nearly full: refusing new holds, grants, keys and sessions until space is freed",
				zap.String("dir", g.dir), zap.Int64("free_bytes", free), zap.Int64("reserve_bytes", g.reserve))
		}
		return
	}
	g.low.Store(nil)
	if was {
		g.log.Info("ledger disk has space again: taking new work", zap.String("dir", g.dir), zap.Int64("free_bytes", free))
	}
}

// waitForFloor returns once the free space is at least a quarter of the reserve, or stop is
// closed: the committer's last line of defence against a disk filled between two checks.
func (g *spaceGuard) waitForFloor(stop <-chan struct{}) {
	if g.reserve <= 0 {
		return
	}
	floor := g.reserve / 4
	logged := false
	for {
		free := g.check()
		if free < 0 || free >= floor {
			return
		}
		if !logged {
			logged = true
			g.log.Error("ledger disk full: commits wait until space is freed", zap.String("dir", g.dir), zap.Int64("free_bytes", free))
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
