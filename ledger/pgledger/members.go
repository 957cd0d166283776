package pgledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-textgen/textgen/ledger"
)

// Organisations in the PostgreSQL engine (ledger/members.go; the tables memberships and member_usage
// of 00010_organisations.sql). Every change of one organisation's members, and its members' key
// creation, runs in one transaction under an advisory lock of the organisation's members, so
// they are serialised across instances; the monthly counts are the hold path's
// (ledger_member_take), under the organisation's account row lock.

const pgMemberSelect = `SELECT m.org_id, m.member_id, coalesce(ma.email, ''), oa.email, m.role, m.monthly_cap,
		coalesce(u.used, 0), m.pending, m.created
	FROM memberships m JOIN accounts oa ON oa.id = m.org_id LEFT JOIN accounts ma ON ma.id = m.member_id
	LEFT JOIN member_usage u ON u.org_id = m.org_id AND u.member_id = m.member_id AND u.month = $1 `

func scanMembership(r pgx.CollectableRow) (ledger.Membership, error) {
	var m ledger.Membership
	var role string
	var created int64
	err := r.Scan(&m.OrgID, &m.MemberID, &m.Email, &m.OrgEmail, &role, &m.MonthlyCap, &m.Used, &m.Pending, &created)
	m.Role, m.Created = ledger.Role(role), pgTime(created)
	return m, err
}

func pgMembers(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, month string, where string, args ...any) ([]ledger.Membership, error) {
	rows, _ := q.Query(ctx, pgMemberSelect+where+` ORDER BY m.created, m.member_id, m.org_id`,
		append([]any{month}, args...)...)
	return pgx.CollectRows(rows, scanMembership)
}

// orgTx runs f in one transaction under the advisory lock of organisation orgID's members.
func (s *Postgres) orgTx(ctx context.Context, what, orgID string, f func(context.Context, pgx.Tx) error) error {
	wctx, done, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer done()
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(wctx, `SELECT pg_advisory_xact_lock(hashtextextended('ledger members ' || $1, 0))`, orgID); err != nil {
			return err
		}
		return f(wctx, tx)
	})
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrNotMember) || errors.Is(err, ledger.ErrLastOwner) ||
		errors.Is(err, ledger.ErrAlreadyMember) || errors.Is(err, ledger.ErrNotOrganisation) || errors.Is(err, ledger.ErrInvalidArgument) ||
		errors.Is(err, ledger.ErrTooManyKeys) {
		return err
	}
	return pgErr(ctx, what, err)
}

// orgMembers is the organisation's members, read in tx; ErrNotFound if it does not exist.
func (s *Postgres) orgMembers(ctx context.Context, tx pgx.Tx, orgID string) ([]ledger.Membership, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, orgID).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("account %q: %w", orgID, ledger.ErrNotFound)
	}
	return pgMembers(ctx, tx, ledger.MonthOf(s.now()), `WHERE m.org_id = $2`, orgID)
}

func findMember(ms []ledger.Membership, orgID, memberID string) (ledger.Membership, error) {
	for _, m := range ms {
		if m.MemberID == memberID {
			return m, nil
		}
	}
	return ledger.Membership{}, fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
}

// MakeOrganisation turns the account into an organisation, itself its first owner.
func (s *Postgres) MakeOrganisation(ctx context.Context, accountID string) (ledger.Membership, error) {
	var out ledger.Membership
	err := s.orgTx(ctx, "making an organisation", accountID, func(ctx context.Context, tx pgx.Tx) error {
		ms, err := s.orgMembers(ctx, tx, accountID)
		if err != nil {
			return err
		}
		if out, err = findMember(ms, accountID, accountID); err == nil {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO memberships (org_id, member_id, role, created) VALUES ($1, $1, 'owner', $2)`,
			accountID, s.now().UTC().UnixNano()); err != nil {
			return err
		}
		// The flag the hold functions read instead of the memberships (00010_organisations.sql).
		if _, err := tx.Exec(ctx, `UPDATE accounts SET organisation = true WHERE id = $1`, accountID); err != nil {
			return err
		}
		ms, err = s.orgMembers(ctx, tx, accountID)
		if err != nil {
			return err
		}
		out, err = findMember(ms, accountID, accountID)
		return err
	})
	return out, err
}

// AddMember makes memberID a member, or an invitee, of organisation orgID.
func (s *Postgres) AddMember(ctx context.Context, orgID, memberID string, role ledger.Role, pending bool) (ledger.Membership, error) {
	if err := ledger.CheckRole(role); err != nil {
		return ledger.Membership{}, err
	}
	if orgID == memberID {
		return ledger.Membership{}, fmt.Errorf("an organisation is its own member already: %w", ledger.ErrInvalidArgument)
	}
	var out ledger.Membership
	err := s.orgTx(ctx, "adding a member", orgID, func(ctx context.Context, tx pgx.Tx) error {
		ms, err := s.orgMembers(ctx, tx, orgID)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return fmt.Errorf("account %q: %w", orgID, ledger.ErrNotOrganisation)
		}
		if _, err := findMember(ms, orgID, memberID); err == nil {
			return fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrAlreadyMember)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO memberships (org_id, member_id, role, pending, created)
			SELECT $1, id, $3, $4, $5 FROM accounts WHERE id = $2`, orgID, memberID, string(role), pending, s.now().UTC().UnixNano())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("account %q: %w", memberID, ledger.ErrNotFound)
		}
		ms, err = s.orgMembers(ctx, tx, orgID)
		if err != nil {
			return err
		}
		out, err = findMember(ms, orgID, memberID)
		return err
	})
	return out, err
}

// updateMember runs set (an UPDATE of memberships with $1 the org, $2 the member, and args)
// after check.
func (s *Postgres) updateMember(ctx context.Context, orgID, memberID string, check func([]ledger.Membership) error, set string, args ...any) (ledger.Membership, error) {
	var out ledger.Membership
	err := s.orgTx(ctx, "changing a member", orgID, func(ctx context.Context, tx pgx.Tx) error {
		ms, err := s.orgMembers(ctx, tx, orgID)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
		}
		if err != nil {
			return err
		}
		if _, err := findMember(ms, orgID, memberID); err != nil {
			return err
		}
		if check != nil {
			if err := check(ms); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE memberships SET `+set+` WHERE org_id = $1 AND member_id = $2`,
			append([]any{orgID, memberID}, args...)...); err != nil {
			return err
		}
		ms, err = s.orgMembers(ctx, tx, orgID)
		if err != nil {
			return err
		}
		out, err = findMember(ms, orgID, memberID)
		return err
	})
	return out, err
}

// AcceptMembership completes an invitation.
func (s *Postgres) AcceptMembership(ctx context.Context, orgID, memberID string) (ledger.Membership, error) {
	return s.updateMember(ctx, orgID, memberID, nil, `pending = false`)
}

// SetMemberRole changes a member's role, keeping an owner.
func (s *Postgres) SetMemberRole(ctx context.Context, orgID, memberID string, role ledger.Role) (ledger.Membership, error) {
	if err := ledger.CheckRole(role); err != nil {
		return ledger.Membership{}, err
	}
	return s.updateMember(ctx, orgID, memberID, func(ms []ledger.Membership) error {
		_, err := ledger.MemberChange(ms, orgID, memberID, role, false)
		return err
	}, `role = $3`, string(role))
}

// SetMemberCap sets a member's monthly cap (0: none).
func (s *Postgres) SetMemberCap(ctx context.Context, orgID, memberID string, c int64) (ledger.Membership, error) {
	if err := ledger.CheckCap(c); err != nil {
		return ledger.Membership{}, err
	}
	return s.updateMember(ctx, orgID, memberID, nil, `monthly_cap = $3`, c)
}

// RemoveMember ends a membership and revokes the member's keys in the same transaction.
func (s *Postgres) RemoveMember(ctx context.Context, orgID, memberID string) ([]ledger.Key, error) {
	var revoked []ledger.Key
	err := s.orgTx(ctx, "removing a member", orgID, func(ctx context.Context, tx pgx.Tx) error {
		ms, err := s.orgMembers(ctx, tx, orgID)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
		}
		if err != nil {
			return err
		}
		if _, err := ledger.MemberChange(ms, orgID, memberID, "", true); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM memberships WHERE org_id = $1 AND member_id = $2`, orgID, memberID); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `WITH k AS (UPDATE api_keys SET revoked = $3 WHERE account_id = $1 AND member_id = $2 AND revoked IS NULL
			RETURNING *) SELECT `+pgKeyCols+` FROM k LEFT JOIN api_key_usage u ON u.key_id = k.id`, orgID, memberID, s.now().UTC().UnixNano())
		revoked, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Key, error) {
			var kr keyRow
			err := r.Scan(kr.dest()...)
			return kr.key(), err
		})
		return err
	})
	return revoked, err
}

// GetMembership returns memberID's membership of orgID.
func (s *Postgres) GetMembership(ctx context.Context, orgID, memberID string) (ledger.Membership, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return ledger.Membership{}, err
	}
	defer done()
	ms, err := pgMembers(qctx, s.pool, ledger.MonthOf(s.now()), `WHERE m.org_id = $2 AND m.member_id = $3`, orgID, memberID)
	if err != nil {
		return ledger.Membership{}, pgErr(ctx, "reading a membership", err)
	}
	return findMember(ms, orgID, memberID)
}

// ListMembers lists an organisation's members and invitations, oldest first.
func (s *Postgres) ListMembers(ctx context.Context, orgID string) ([]ledger.Membership, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.mustExist(qctx, orgID); err != nil {
		return nil, err
	}
	ms, err := pgMembers(qctx, s.pool, ledger.MonthOf(s.now()), `WHERE m.org_id = $2`, orgID)
	return ms, pgErr(ctx, "listing members", err)
}

// MembershipsOf lists the organisations memberID belongs or is invited to, oldest first.
func (s *Postgres) MembershipsOf(ctx context.Context, memberID string) ([]ledger.Membership, error) {
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	ms, err := pgMembers(qctx, s.pool, ledger.MonthOf(s.now()), `WHERE m.member_id = $2`, memberID)
	if ms == nil {
		ms = []ledger.Membership{}
	}
	return ms, pgErr(ctx, "listing memberships", err)
}

// MemberUsage lists what each member's keys took in the months [from, to].
func (s *Postgres) MemberUsage(ctx context.Context, orgID, from, to string) ([]ledger.MemberMonth, error) {
	if err := ledger.CheckMonth(from); err != nil {
		return nil, err
	}
	if err := ledger.CheckMonth(to); err != nil {
		return nil, err
	}
	qctx, done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.mustExist(qctx, orgID); err != nil {
		return nil, err
	}
	rows, _ := s.pool.Query(qctx, `SELECT u.member_id, coalesce(a.email, ''), u.month, u.used FROM member_usage u
		LEFT JOIN accounts a ON a.id = u.member_id
		WHERE u.org_id = $1 AND u.month >= $2 AND u.month <= $3`, orgID, from, to)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.MemberMonth, error) {
		var m ledger.MemberMonth
		return m, r.Scan(&m.MemberID, &m.Email, &m.Month, &m.Credits)
	})
	if err != nil {
		return nil, pgErr(ctx, "reading member usage", err)
	}
	if out == nil {
		out = []ledger.MemberMonth{}
	}
	ledger.SortMemberMonths(out)
	return out, nil
}

// CreateMemberKey makes a key of organisation orgID for its accepted member memberID, under the
// lock of the organisation's members, so that RemoveMember either refuses it or revokes it.
func (s *Postgres) CreateMemberKey(ctx context.Context, orgID, memberID string, mode ledger.Mode, name string, expires time.Time, maxActive int) (string, ledger.Key, error) {
	t := s.now().UTC()
	expires, err := ledger.CheckKeyRequest(mode, name, expires, t)
	if err != nil {
		return "", ledger.Key{}, err
	}
	if err := pgStorable("key name", name); err != nil {
		return "", ledger.Key{}, err
	}
	full := ledger.NewFullKey(mode)
	d := sha256.Sum256([]byte(full))
	stored := memberID
	if memberID == orgID {
		stored = ""
	}
	k := ledger.Key{ID: ledger.NewKeyID(), AccountID: orgID, Mode: mode, Name: name, Prefix: full[:len(ledger.LivePrefix)],
		Last4: full[len(full)-4:], Created: t, Expires: expires, MemberID: stored}
	err = s.orgTx(ctx, "creating a member's key", orgID, func(ctx context.Context, tx pgx.Tx) error {
		var pending bool
		err := tx.QueryRow(ctx, `SELECT pending FROM memberships WHERE org_id = $1 AND member_id = $2`, orgID, memberID).Scan(&pending)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && pending) {
			return fmt.Errorf("%q in %q: %w", memberID, orgID, ledger.ErrNotMember)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ledger keys ' || $1, 0))`, orgID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (id, account_id, digest, mode, name, prefix, last4, created, expires, member_id)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $11
			WHERE $10 <= 0 OR (SELECT count(*) FROM api_keys WHERE account_id = $2 AND revoked IS NULL) < $10`,
			k.ID, k.AccountID, d[:], string(k.Mode), k.Name, k.Prefix, k.Last4, t.UnixNano(), pgNanos(expires), maxActive, stored)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("account %q has %d keys: %w", orgID, maxActive, ledger.ErrTooManyKeys)
		}
		return nil
	})
	if err != nil {
		return "", ledger.Key{}, err
	}
	return full, k, nil
}
