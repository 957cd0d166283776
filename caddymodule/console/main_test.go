package console

import (
	"os"
	"testing"

	"github.com/caddy-textgen/textgen/ledger/pgtest"
)

// TestMain stops the PostgreSQL server that tests of this package may have started.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
