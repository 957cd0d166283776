-- Credits that expire (ledger/expiry.go). A live grant or purchase with an expiry makes a lot:
-- lots.remaining is what of it is neither spent nor expired (with what open holds took of it),
-- lots.held what open holds took; hold_lots is what each open hold took of each lot.
-- accounts.has_lots is read from the locked row, so an account without lots pays nothing more.
--
-- Holds keep their bookkeeping of money where it was (ledger_holds, ledger_hold): what a hold
-- takes of the lots and gives back follows the holds table, through statement triggers, which
-- change only lots and hold_lots. Expiry changes the balance, so it runs where the account's row
-- is locked: ledger_lock expires what is due before it returns the row, by the ledger clock of
-- the transaction (the setting textgen.now, set by the group committer in each batch; without
-- it nothing expires there), and ledger_expire_account does the same for the sweep and Balance.
-- ledger_grant takes the expiry as one more argument (the one of nine arguments grants credits that never expire).

-- +goose Up
ALTER TABLE accounts ADD COLUMN has_lots boolean NOT NULL DEFAULT false;

CREATE TABLE lots (
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    seq        bigint NOT NULL,
    amount     bigint NOT NULL,
    remaining  bigint NOT NULL,
    held       bigint NOT NULL DEFAULT 0,
    expires    bigint NOT NULL,
    PRIMARY KEY (account_id, seq),
    CONSTRAINT lots_in_range CHECK (held >= 0 AND held <= remaining AND remaining <= amount)
);
-- The sweep's worklist.
CREATE INDEX lots_expires ON lots (expires);

CREATE TABLE hold_lots (
    account_id text COLLATE "C" NOT NULL,
    request_id text COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    credits    bigint NOT NULL CHECK (credits > 0),
    PRIMARY KEY (account_id, request_id, seq),
    FOREIGN KEY (account_id, seq) REFERENCES lots (account_id, seq)
);

ALTER TABLE entries DROP CONSTRAINT entries_kind_check;
ALTER TABLE entries ADD CONSTRAINT entries_kind_check
    CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment', 'refund', 'dispute', 'expire'));

-- ledger_now is the ledger clock of this transaction (unix nanoseconds), NULL when unset.
-- +goose StatementBegin
CREATE FUNCTION ledger_now() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('textgen.now', true), '')::bigint
$$;
-- +goose StatementEnd

-- ledger_expire_lots is account row a after what is left and not held of each of its lots
-- expired by p_at leaves: one expire entry per lot, never taking available below zero. It
-- writes the entries and the lots, drops the lots with nothing left or held, and clears
-- has_lots when none is left; the caller saves a.
-- +goose StatementBegin
CREATE FUNCTION ledger_expire_lots(a accounts, p_at bigint) RETURNS accounts
LANGUAGE plpgsql AS $$
DECLARE
    l lots;
    n bigint;
BEGIN
    FOR l IN SELECT * FROM lots WHERE account_id = a.id AND expires <= p_at AND remaining > held
        ORDER BY expires, seq FOR UPDATE LOOP
        n := least(l.remaining - l.held, greatest(ledger_available(a, 'live'), 0));
        UPDATE lots SET remaining = held WHERE account_id = a.id AND seq = l.seq;
        IF n > 0 THEN
            a := ledger_change(a, 'live', -n, 0);
            INSERT INTO entries SELECT (ledger_entry(a, 'expire', 'live', -n, '', '', '', '',
                'credits of entry ' || l.seq || ' expired', 0, '', p_at, 0)).*;
        END IF;
    END LOOP;
    DELETE FROM lots WHERE account_id = a.id AND remaining = 0 AND held = 0;
    IF NOT EXISTS (SELECT FROM lots WHERE account_id = a.id) THEN
        UPDATE accounts SET has_lots = false WHERE id = a.id;
        a.has_lots := false;
    END IF;
    RETURN a;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_lock(p_account text) RETURNS accounts
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    v_seq bigint;
    v_now bigint;
BEGIN
    SELECT * INTO a FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF a.has_lots THEN
        v_now := ledger_now();
        IF v_now IS NOT NULL THEN
            v_seq := a.next_seq;
            a := ledger_expire_lots(a, v_now);
            IF a.next_seq <> v_seq THEN
                PERFORM ledger_save(a);
            END IF;
        END IF;
    END IF;
    RETURN a;
END
$$;
-- +goose StatementEnd

-- ledger_expire_account expires what of the account's lots is due at p_at (the sweep, Balance).
-- +goose StatementBegin
CREATE FUNCTION ledger_expire_account(p_account text, p_at bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    v_seq bigint;
BEGIN
    SELECT * INTO a FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF a.has_lots THEN
        v_seq := a.next_seq;
        a := ledger_expire_lots(a, p_at);
        IF a.next_seq <> v_seq THEN
            PERFORM ledger_save(a);
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

-- ledger_take_lots takes p_credits for hold p_rid made at p_at from the account's lots that
-- expire after p_at, soonest first: held by the open hold (hold_lots), or, with p_spend (a hold
-- settled as it was made, a late settle), spent at once.
-- +goose StatementBegin
CREATE FUNCTION ledger_take_lots(p_account text, p_rid text, p_credits bigint, p_at bigint, p_spend boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    l lots;
    v_left bigint := p_credits;
    n bigint;
BEGIN
    FOR l IN SELECT * FROM lots WHERE account_id = p_account AND expires > p_at AND remaining > held
        ORDER BY expires, seq FOR UPDATE LOOP
        EXIT WHEN v_left <= 0;
        n := least(v_left, l.remaining - l.held);
        IF p_spend THEN
            UPDATE lots SET remaining = remaining - n WHERE account_id = p_account AND seq = l.seq;
        ELSE
            UPDATE lots SET held = held + n WHERE account_id = p_account AND seq = l.seq;
            INSERT INTO hold_lots VALUES (p_account, p_rid, l.seq, n);
        END IF;
        v_left := v_left - n;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_holds_made() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    h record;
BEGIN
    FOR h IN SELECT n.account_id, n.request_id, n.credits, n.created, n.state FROM made n
        JOIN accounts a ON a.id = n.account_id
        WHERE a.has_lots AND n.mode = 'live' AND n.state <> 'voided' ORDER BY n.account_id, n.hold_seq LOOP
        PERFORM ledger_take_lots(h.account_id, h.request_id, h.credits, h.created, h.state = 'settled');
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_holds_resolved() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    t record;
BEGIN
    FOR h IN SELECT n.account_id, n.request_id, n.credits, n.resolved, n.state, o.state AS was FROM after_rows n
        JOIN before_rows o ON o.account_id = n.account_id AND o.request_id = n.request_id
        JOIN accounts a ON a.id = n.account_id
        WHERE a.has_lots AND n.mode = 'live' AND n.state <> o.state ORDER BY n.account_id, n.resolve_seq LOOP
        IF h.was = 'open' THEN
            FOR t IN DELETE FROM hold_lots WHERE account_id = h.account_id AND request_id = h.request_id
                RETURNING seq, credits LOOP
                UPDATE lots SET held = held - t.credits,
                    remaining = remaining - CASE WHEN h.state = 'settled' THEN t.credits ELSE 0 END
                WHERE account_id = h.account_id AND seq = t.seq;
            END LOOP;
        ELSIF h.was = 'voided' AND h.state = 'settled' THEN
            PERFORM ledger_take_lots(h.account_id, h.request_id, h.credits, h.resolved, true);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER holds_made_take_lots AFTER INSERT ON holds REFERENCING NEW TABLE AS made
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_holds_made();
CREATE TRIGGER holds_resolved_release_lots AFTER UPDATE ON holds REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_holds_resolved();

-- +goose StatementBegin
CREATE FUNCTION ledger_grant(p_account text, p_mode text, p_kind text, p_credits bigint, p_reference text,
    p_reason text, p_cents bigint, p_currency text, p_at bigint, p_expires bigint,
    OUT o_outcome text, OUT o_entry entries, OUT o_account accounts)
LANGUAGE plpgsql AS $$
BEGIN
    o_account := ledger_lock(p_account);
    IF o_account.id IS NULL THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    IF p_reference <> '' THEN
        SELECT * INTO o_entry FROM entries
        WHERE account_id = p_account AND reference = p_reference AND reference <> '';
        IF FOUND THEN
            o_outcome := 'repeated';
            RETURN;
        END IF;
    END IF;
    IF p_credits < 0 AND ledger_available(o_account, p_mode) + p_credits < 0 THEN
        o_outcome := 'insufficient';
        RETURN;
    END IF;
    o_account := ledger_change(o_account, p_mode, p_credits, 0);
    o_entry := ledger_entry(o_account, p_kind, p_mode, p_credits, '', '', '', p_reference, p_reason,
        p_cents, p_currency, p_at);
    INSERT INTO entries SELECT (o_entry).*;
    PERFORM ledger_save(o_account);
    IF p_expires > 0 THEN
        INSERT INTO lots VALUES (p_account, o_entry.seq, p_credits, p_credits, 0, p_expires);
        UPDATE accounts SET has_lots = true WHERE id = p_account;
        o_account.has_lots := true;
    END IF;
    o_outcome := 'ok';
END
$$;
-- +goose StatementEnd

-- The grant of nine arguments (ledger_refill's) is the grant that never expires.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_grant(p_account text, p_mode text, p_kind text, p_credits bigint, p_reference text,
    p_reason text, p_cents bigint, p_currency text, p_at bigint,
    OUT o_outcome text, OUT o_entry entries, OUT o_account accounts)
LANGUAGE sql AS $$
    SELECT * FROM ledger_grant(p_account, p_mode, p_kind, p_credits, p_reference, p_reason, p_cents, p_currency, p_at, 0)
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ledger_grant(text, text, text, bigint, text, text, bigint, text, bigint, bigint);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_grant(p_account text, p_mode text, p_kind text, p_credits bigint, p_reference text,
    p_reason text, p_cents bigint, p_currency text, p_at bigint,
    OUT o_outcome text, OUT o_entry entries, OUT o_account accounts)
LANGUAGE plpgsql AS $$
BEGIN
    o_account := ledger_lock(p_account);
    IF o_account.id IS NULL THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    IF p_reference <> '' THEN
        SELECT * INTO o_entry FROM entries
        WHERE account_id = p_account AND reference = p_reference AND reference <> '';
        IF FOUND THEN
            o_outcome := 'repeated';
            RETURN;
        END IF;
    END IF;
    IF p_credits < 0 AND ledger_available(o_account, p_mode) + p_credits < 0 THEN
        o_outcome := 'insufficient';
        RETURN;
    END IF;
    o_account := ledger_change(o_account, p_mode, p_credits, 0);
    o_entry := ledger_entry(o_account, p_kind, p_mode, p_credits, '', '', '', p_reference, p_reason,
        p_cents, p_currency, p_at);
    INSERT INTO entries SELECT (o_entry).*;
    PERFORM ledger_save(o_account);
    o_outcome := 'ok';
END
$$;
-- +goose StatementEnd

DROP TRIGGER holds_resolved_release_lots ON holds;
DROP TRIGGER holds_made_take_lots ON holds;
DROP FUNCTION ledger_holds_resolved();
DROP FUNCTION ledger_holds_made();
DROP FUNCTION ledger_take_lots(text, text, bigint, bigint, boolean);
DROP FUNCTION ledger_expire_account(text, bigint);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_lock(p_account text) RETURNS accounts
LANGUAGE sql AS $$
    SELECT * FROM accounts WHERE id = p_account FOR NO KEY UPDATE
$$;
-- +goose StatementEnd

DROP FUNCTION ledger_expire_lots(accounts, bigint);
DROP FUNCTION ledger_now();
-- The credits that expired stay gone: their entries become adjustments of the same amount.
UPDATE entries SET kind = 'adjustment' WHERE kind = 'expire';
ALTER TABLE entries DROP CONSTRAINT entries_kind_check;
ALTER TABLE entries ADD CONSTRAINT entries_kind_check
    CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment', 'refund', 'dispute'));
DROP TABLE hold_lots;
DROP TABLE lots;
ALTER TABLE accounts DROP COLUMN has_lots;
