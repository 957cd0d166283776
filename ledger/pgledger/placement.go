package pgledger

import "github.com/caddy-textgen/textgen/ledger"

// Placement: a PostgreSQL ledger is shared by every instance given its URL, and its files are
// the database server's, none on this machine.
func (s *Postgres) Placement() ledger.Placement { return PlacementOf() }

// PlacementOf is the Placement of every ledger that OpenPostgres opens, known before it is open
// (a config states it before its start reaches the database).
func PlacementOf() ledger.Placement { return ledger.Placement{Shared: true} }
