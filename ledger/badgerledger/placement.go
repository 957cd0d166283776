package badgerledger

import "github.com/caddy-textgen/textgen/ledger"

// Placement: a Badger ledger belongs to the one process that holds its directory's lock, and
// its files are that directory (none in memory).
func (s *Badger) Placement() ledger.Placement { return PlacementOf(s.dir) }

// PlacementOf is the Placement of the ledger that Open(dir, ...) opens, known before it is
// open (a config states it before its start opens the ledger).
func PlacementOf(dir string) ledger.Placement { return ledger.Placement{Dir: dir} }
