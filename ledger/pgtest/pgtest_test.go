package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// TestServer: a database per test, and a server that stops and starts again on its port.
func TestServer(t *testing.T) {
	url := NewDatabase(t)
	ctx := context.Background()
	query := func() error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var n int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&n)
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	s := Shared(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := query(); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := query(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
