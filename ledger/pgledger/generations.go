package pgledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Kept generations of the PostgreSQL engine (migrations/00002_generations.sql): a row
// in generations and one per chunk in generation_chunks, deleted with it (ON DELETE CASCADE).
// Every instance reads what any instance wrote, so a client may resume on another instance. The
// sweep (every SweepInterval and at OpenPostgres) deletes the rows whose window has ended by the
// ledger clock; reads check it too.

const pgGenCols = "account_id, request_id, mode, tool, language, state, created, finished, expires, output_tokens, pieces, bytes, chunks, finish_reason"

// PutGenerations upserts the records and stores the chunks in one transaction, one batch.
func (s *Postgres) PutGenerations(ctx context.Context, puts ...ledger.GenerationPut) error {
	if err := ledger.CheckGenerationPuts(puts, s.now()); err != nil {
		return err
	}
	for _, p := range puts {
		if err := pgStorable("generation", p.Record.RequestID, p.Record.Tool, p.Record.Language); err != nil {
			return err
		}
	}
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := &pgx.Batch{}
	for _, p := range puts {
		queueGeneration(b, p)
		queueReceiptDigest(b, p)
	}
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(wctx, b).Close()
	})
	if pgForeignKey(err) {
		return fmt.Errorf("an account of the generations: %w", ledger.ErrNotFound)
	}
	return pgErr(ctx, "storing generations", err)
}

// queueGeneration queues one put's upserts.
func queueGeneration(b *pgx.Batch, p ledger.GenerationPut) {
	rec := p.Record
	rec.Chunks = p.First + len(p.Chunks)
	var finished *int64
	if !rec.Finished.IsZero() {
		f := rec.Finished.UnixNano()
		finished = &f
	}
	b.Queue(`INSERT INTO generations (`+pgGenCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (account_id, request_id) DO UPDATE SET mode = $3, tool = $4, language = $5, state = $6,
		created = $7, finished = $8, expires = $9, output_tokens = $10, pieces = $11, bytes = $12, chunks = $13,
		finish_reason = $14`,
		rec.AccountID, rec.RequestID, string(rec.Mode), rec.Tool, rec.Language, string(rec.State),
		rec.Created.UnixNano(), finished, rec.Expires.UnixNano(), rec.OutputTokens, rec.Pieces, rec.Bytes, rec.Chunks,
		rec.FinishReason)
	for i, c := range p.Chunks {
		b.Queue(`INSERT INTO generation_chunks (account_id, request_id, n, data) VALUES ($1, $2, $3, $4)
			ON CONFLICT (account_id, request_id, n) DO UPDATE SET data = $4`, rec.AccountID, rec.RequestID, p.First+i, c)
	}
}

// GetGeneration returns the record and its chunks from number from on, in one snapshot.
func (s *Postgres) GetGeneration(ctx context.Context, accountID, requestID string, from int) (ledger.GenerationRecord, [][]byte, error) {
	if from < 0 {
		return ledger.GenerationRecord{}, nil, fmt.Errorf("chunk number %d: %w", from, ledger.ErrInvalidArgument)
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.GenerationRecord{}, nil, err
	}
	defer done()
	var rec ledger.GenerationRecord
	var chunks [][]byte
	notFound := fmt.Errorf("generation %q of account %q: %w", requestID, accountID, ledger.ErrNotFound)
	err = pgx.BeginTxFunc(qctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var mode, state string
		var created, expires int64
		var finished *int64
		err := tx.QueryRow(qctx, `SELECT `+pgGenCols+` FROM generations WHERE account_id = $1 AND request_id = $2 AND expires > $3`,
			accountID, requestID, s.now().UnixNano()).Scan(&rec.AccountID, &rec.RequestID, &mode, &rec.Tool, &rec.Language, &state,
			&created, &finished, &expires, &rec.OutputTokens, &rec.Pieces, &rec.Bytes, &rec.Chunks, &rec.FinishReason)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound
		}
		if err != nil {
			return err
		}
		rec.Mode, rec.State = ledger.Mode(mode), ledger.GenerationState(state)
		rec.Created, rec.Expires, rec.Finished = pgTime(created), pgTime(expires), pgTimeOrZero(finished)
		next := from
		rows, _ := tx.Query(qctx, `SELECT n, data FROM generation_chunks WHERE account_id = $1 AND request_id = $2 AND n >= $3 AND n < $4 ORDER BY n`,
			accountID, requestID, from, rec.Chunks)
		type row struct {
			N    int
			Data []byte
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return err
		}
		for _, r := range got {
			if r.N != next {
				return fmt.Errorf("generation %q: chunk %d of %d is missing", requestID, next, rec.Chunks)
			}
			chunks = append(chunks, r.Data)
			next++
		}
		if next < rec.Chunks {
			return fmt.Errorf("generation %q: chunk %d of %d is missing", requestID, next, rec.Chunks)
		}
		return nil
	})
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.GenerationRecord{}, nil, err
	}
	if err != nil {
		return ledger.GenerationRecord{}, nil, pgErr(ctx, "reading generation", err)
	}
	return rec, chunks, nil
}

// DeleteGeneration deletes the record and (by cascade) its chunks.
func (s *Postgres) DeleteGeneration(ctx context.Context, accountID, requestID string) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = s.pool.Exec(wctx, `DELETE FROM generations WHERE account_id = $1 AND request_id = $2`, accountID, requestID)
	return pgErr(ctx, "deleting generation", err)
}

// DeleteExpiredGenerations deletes every generation whose window has ended by the ledger clock.
func (s *Postgres) DeleteExpiredGenerations(ctx context.Context) (int, error) {
	wctx, done, err := s.admit(ctx, s.opts.QueryTimeout)
	if err != nil {
		return 0, err
	}
	defer done()
	return s.deleteExpiredGenerations(wctx, s.now())
}

// deleteExpiredGenerations is DeleteExpiredGenerations for a call admitted already.
func (s *Postgres) deleteExpiredGenerations(ctx context.Context, t time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM generations WHERE expires <= $1`, t.UnixNano())
	if err != nil {
		return 0, pgErr(ctx, "deleting expired generations", err)
	}
	return int(tag.RowsAffected()), nil
}
