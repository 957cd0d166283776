// Package pgledger is the PostgreSQL engine of the ledger: a ledger.Store in one database that
// several Caddy instances share (OpenPostgres; its design is described on type Postgres). Its
// schema is migrations/, one goose file per change, applied at open under an advisory lock;
// never edit a shipped one. CopyLedger moves a ledger.Exporter (a Badger ledger) into an empty
// database. It passes the conformance suite of ledger/ledgertest.
package pgledger
