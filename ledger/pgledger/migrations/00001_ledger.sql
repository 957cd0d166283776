-- The ledger on PostgreSQL (ledger/postgres_*.go). Applied by goose at OpenPostgres, under an
-- advisory lock; never edit a migration that has shipped: add the next one.
--
-- Times are unix nanoseconds in bigint columns: the ledger returns exactly the times it was
-- given (Go's time has nanoseconds, timestamptz microseconds). Money and counts are bigint.
-- Ids, references and keys are COLLATE "C", so that the database orders and compares them
-- byte by byte, as Go does, whatever the cluster's locale (ListAccounts pages by id).

-- +goose Up
CREATE TABLE accounts (
    id           text COLLATE "C" PRIMARY KEY,
    email        text COLLATE "C" NOT NULL UNIQUE,
    status       text NOT NULL CHECK (status IN ('active', 'disabled')),
    created      bigint NOT NULL,
    -- The figures that Verify recomputes from the entries: balances, open holds, and the
    -- number of the account's next entry.
    balance      bigint NOT NULL DEFAULT 0,
    held         bigint NOT NULL DEFAULT 0,
    test_balance bigint NOT NULL DEFAULT 0,
    test_held    bigint NOT NULL DEFAULT 0,
    next_seq     bigint NOT NULL DEFAULT 1,
    CONSTRAINT accounts_available_not_negative
        CHECK (held >= 0 AND test_held >= 0 AND balance >= held AND test_balance >= test_held)
);

-- One immutable line per change of an account's credits, numbered 1, 2, 3... per account.
CREATE TABLE entries (
    account_id      text COLLATE "C" NOT NULL REFERENCES accounts (id),
    seq             bigint NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment')),
    mode            text NOT NULL CHECK (mode IN ('live', 'test')),
    amount          bigint NOT NULL,
    balance_after   bigint NOT NULL,
    available_after bigint NOT NULL,
    request_id      text COLLATE "C" NOT NULL DEFAULT '',
    key_id          text NOT NULL DEFAULT '',
    tool            text NOT NULL DEFAULT '',
    reference       text COLLATE "C" NOT NULL DEFAULT '',
    reason          text NOT NULL DEFAULT '',
    amount_cents    bigint NOT NULL DEFAULT 0,
    currency        text NOT NULL DEFAULT '',
    at              bigint NOT NULL,
    PRIMARY KEY (account_id, seq)
);
-- A grant reference (a Stripe session id...) credits an account once, whichever instance
-- receives it and however often.
CREATE UNIQUE INDEX entries_reference ON entries (account_id, reference) WHERE reference <> '';

-- Every hold ever taken; state moves from open to settled or voided exactly once.
CREATE TABLE holds (
    account_id  text COLLATE "C" NOT NULL REFERENCES accounts (id),
    request_id  text COLLATE "C" NOT NULL,
    mode        text NOT NULL CHECK (mode IN ('live', 'test')),
    state       text NOT NULL CHECK (state IN ('open', 'settled', 'voided')),
    key_id      text NOT NULL DEFAULT '',
    tool        text NOT NULL DEFAULT '',
    created     bigint NOT NULL,
    expires     bigint NOT NULL,
    hold_seq    bigint NOT NULL,
    resolved    bigint,
    resolve_seq bigint,
    reason      text NOT NULL DEFAULT '',
    PRIMARY KEY (account_id, request_id)
);
-- The expiry sweep's worklist.
CREATE INDEX holds_open_expires ON holds (expires) WHERE state = 'open';

-- API keys: the SHA-256 digest of the key, never the key.
CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    digest     bytea NOT NULL UNIQUE,
    mode       text NOT NULL CHECK (mode IN ('live', 'test')),
    name       text NOT NULL,
    prefix     text NOT NULL,
    last4      text NOT NULL,
    created    bigint NOT NULL,
    last_used  bigint,
    expires    bigint,
    revoked    bigint
);
CREATE INDEX api_keys_account ON api_keys (account_id, created, id);

-- Passwords: argon2id hashes in PHC form (password.go).
CREATE TABLE credentials (
    account_id text COLLATE "C" PRIMARY KEY REFERENCES accounts (id),
    hash       text NOT NULL,
    updated    bigint NOT NULL
);

-- Browser sessions: the SHA-256 digest of the token, never the token.
CREATE TABLE sessions (
    digest     bytea PRIMARY KEY,
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    created    bigint NOT NULL,
    expires    bigint NOT NULL,
    csrf_token text NOT NULL
);
CREATE INDEX sessions_account ON sessions (account_id);
CREATE INDEX sessions_expires ON sessions (expires);

-- Idempotency-Key records (idempotency.go), kept 24 hours.
CREATE TABLE idempotency (
    account_id  text COLLATE "C" NOT NULL REFERENCES accounts (id),
    idem_key    text COLLATE "C" NOT NULL,
    request_id  text NOT NULL,
    fingerprint text NOT NULL,
    status      integer NOT NULL,
    created     bigint NOT NULL,
    hold_ttl    bigint NOT NULL,
    PRIMARY KEY (account_id, idem_key)
);
CREATE INDEX idempotency_created ON idempotency (created);

-- The functions below are every change of credits. Each call starts by locking its account's
-- row (FOR NO KEY UPDATE: foreign-key checks of other transactions still pass), which orders all
-- changes of one account across every instance; under READ COMMITTED each statement after the
-- lock sees what the transactions before it committed, so "was this request id held", "was
-- this reference used" and "is a credit available" are decided on current data. They report
-- expected outcomes (not_found, insufficient, repeated...) as values instead of raising, so
-- that many of them run in one transaction of the group committer and one caller's refusal
-- does not undo the others'. The account's figures are changed in memory (ledger_change) and
-- written once per call (ledger_save): a hot account's row is updated once per batch, not once
-- per hold.

-- ledger_available is the available credit of mode on account row a.
-- +goose StatementBegin
CREATE FUNCTION ledger_available(a accounts, p_mode text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_mode = 'live' THEN a.balance - a.held ELSE a.test_balance - a.test_held END
$$;
-- +goose StatementEnd

-- ledger_change is account row a after one change of mode's credits: amount to the balance,
-- dheld to the open holds, one more entry. It writes nothing.
-- +goose StatementBegin
CREATE FUNCTION ledger_change(a accounts, p_mode text, p_amount bigint, p_dheld bigint) RETURNS accounts
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_mode = 'live' THEN
        a.balance := a.balance + p_amount;
        a.held := a.held + p_dheld;
    ELSE
        a.test_balance := a.test_balance + p_amount;
        a.test_held := a.test_held + p_dheld;
    END IF;
    a.next_seq := a.next_seq + 1;
    RETURN a;
END
$$;
-- +goose StatementEnd

-- ledger_entry is the entry of the change that made account row a (ledger_change): its number
-- and "after" figures come from a, so they are computed one way for every change. It writes
-- nothing: callers insert the entries of a call together.
-- +goose StatementBegin
CREATE FUNCTION ledger_entry(a accounts, p_kind text, p_mode text, p_amount bigint, p_request text,
    p_key text, p_tool text, p_reference text, p_reason text, p_cents bigint, p_currency text,
    p_at bigint) RETURNS entries
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(a.id, a.next_seq - 1, p_kind, p_mode, p_amount,
        CASE WHEN p_mode = 'live' THEN a.balance ELSE a.test_balance END, ledger_available(a, p_mode),
        p_request, p_key, p_tool, p_reference, p_reason, p_cents, p_currency, p_at)::entries
$$;
-- +goose StatementEnd

-- ledger_lock locks the account's row and returns it (NULL if there is none).
-- +goose StatementBegin
CREATE FUNCTION ledger_lock(p_account text) RETURNS accounts
LANGUAGE sql AS $$
    SELECT * FROM accounts WHERE id = p_account FOR NO KEY UPDATE
$$;
-- +goose StatementEnd

-- ledger_save writes account row a's figures back.
-- +goose StatementBegin
CREATE FUNCTION ledger_save(a accounts) RETURNS void
LANGUAGE sql AS $$
    UPDATE accounts SET balance = a.balance, held = a.held, test_balance = a.test_balance,
        test_held = a.test_held, next_seq = a.next_seq
    WHERE id = a.id
$$;
-- +goose StatementEnd

-- ledger_hold_key names a hold of an account in one string (the length of the account id first,
-- so that no two pairs give the same key).
-- +goose StatementBegin
CREATE FUNCTION ledger_hold_key(p_account text, p_request text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT length(p_account) || ':' || p_account || p_request
$$;
-- +goose StatementEnd

-- ledger_holds runs a series of hold operations, each on account p_accounts[i] at time p_ats[i],
-- in order, and returns one row per operation:
--   hold:   reserve one credit of p_modes[i] for request p_rids[i] (expiring at p_expires[i]); a
--           request id already held reports that hold's state (repeated); a disabled account or
--           no available credit refuses it (disabled, insufficient) and writes nothing.
--   settle: charge the open hold (balance -1); void: release it with p_reasons[i];
--   expire: the sweep's void, reason "expired", only if the hold is still open and expired.
--           Only an open hold is resolved, so a second resolver, another instance or the sweep,
--           changes nothing and reports the first outcome (repeated); no_hold when the account
--           never held the request.
--   not_found when the account does not exist.
-- The accounts are locked in the order they first appear (the committer sorts them, so that all
-- transactions lock in the same order). For speed it then reads the holds named, decides every
-- operation in memory, and writes with one statement each the entries, the new holds, the
-- resolved holds and each account's figures, whatever the number of operations. The update of
-- resolved holds keeps the condition state = 'open' and raises if it finds one resolved already,
-- so a hold is never resolved twice even if that reasoning were wrong.
-- +goose StatementBegin
CREATE FUNCTION ledger_holds(p_accounts text[], p_ats bigint[], p_ops text[], p_rids text[], p_modes text[],
    p_keys text[], p_tools text[], p_expires bigint[], p_reasons text[])
RETURNS TABLE (o_outcome text, o_state text, o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    -- The accounts (accts), their rows as locked and then changed (acct_rows), their first entry
    -- numbers (firsts), and the one being worked on (a, acct_rows[cur]).
    accts text[] := '{}';
    acct_rows accounts[] := '{}';
    firsts bigint[] := '{}';
    a accounts;
    cur int := 0;
    k int;
    -- The holds named, stored before or made now (fresh), found by hold key (hkeys).
    hs holds[];
    hkeys text[];
    fresh boolean[];
    changed boolean[];
    es entries[] := '{}';
    h holds;
    i int;
    j int;
    amount bigint;
    want bigint;
    got bigint;
BEGIN
    FOR i IN 1 .. cardinality(p_ops) LOOP
        IF array_position(accts, p_accounts[i]) IS NULL THEN
            a := ledger_lock(p_accounts[i]);
            accts := accts || p_accounts[i];
            acct_rows := acct_rows || a;
            firsts := firsts || a.next_seq;
        END IF;
    END LOOP;
    -- One primary-key lookup per hold, in one statement. The lateral subquery (OFFSET 0 keeps the
    -- planner from flattening it) leaves the planner no other plan, whatever it believes about
    -- a table it has not analysed yet.
    SELECT coalesce(array_agg(t.h), '{}'), coalesce(array_agg(ledger_hold_key(x.acct, x.rid)), '{}') INTO hs, hkeys
    FROM (SELECT DISTINCT acct, rid FROM unnest(p_accounts, p_rids) AS u (acct, rid)) x,
        LATERAL (SELECT y AS h FROM holds y WHERE y.account_id = x.acct AND y.request_id = x.rid OFFSET 0) t;
    fresh := array_fill(false, ARRAY[cardinality(hs)]);
    changed := fresh;
    FOR i IN 1 .. cardinality(p_ops) LOOP
        k := array_position(accts, p_accounts[i]);
        IF k <> cur THEN
            IF cur > 0 THEN
                acct_rows[cur] := a;
            END IF;
            cur := k;
            a := acct_rows[cur];
        END IF;
        j := array_position(hkeys, ledger_hold_key(p_accounts[i], p_rids[i]));
        o_state := '';
        o_available := 0;
        IF a.id IS NULL THEN
            o_outcome := 'not_found';
        ELSIF p_ops[i] = 'hold' THEN
            IF j IS NOT NULL THEN
                o_outcome := 'repeated';
                o_state := hs[j].state;
                o_available := ledger_available(a, hs[j].mode);
            ELSIF a.status <> 'active' THEN
                o_outcome := 'disabled';
            ELSIF ledger_available(a, p_modes[i]) < 1 THEN
                o_outcome := 'insufficient';
            ELSE
                a := ledger_change(a, p_modes[i], 0, 1);
                es := es || ledger_entry(a, 'hold', p_modes[i], 0, p_rids[i], p_keys[i], p_tools[i], '', '', 0, '', p_ats[i]);
                hs := hs || ROW(a.id, p_rids[i], p_modes[i], 'open', p_keys[i], p_tools[i], p_ats[i], p_expires[i],
                    a.next_seq - 1, NULL, NULL, '')::holds;
                hkeys := hkeys || ledger_hold_key(a.id, p_rids[i]);
                fresh := fresh || true;
                changed := changed || false;
                o_outcome := 'ok';
                o_state := 'open';
                o_available := ledger_available(a, p_modes[i]);
            END IF;
        ELSIF j IS NULL THEN
            o_outcome := 'no_hold';
        ELSIF hs[j].state <> 'open' OR (p_ops[i] = 'expire' AND hs[j].expires > p_ats[i]) THEN
            o_outcome := 'repeated';
            o_state := hs[j].state;
            o_available := ledger_available(a, hs[j].mode);
        ELSE
            h := hs[j];
            amount := CASE WHEN p_ops[i] = 'settle' THEN -1 ELSE 0 END;
            a := ledger_change(a, h.mode, amount, -1);
            h.state := CASE WHEN p_ops[i] = 'settle' THEN 'settled' ELSE 'voided' END;
            h.resolved := p_ats[i];
            h.resolve_seq := a.next_seq - 1;
            h.reason := CASE p_ops[i] WHEN 'settle' THEN '' WHEN 'expire' THEN 'expired' ELSE p_reasons[i] END;
            hs[j] := h;
            changed[j] := true;
            es := es || ledger_entry(a, CASE WHEN p_ops[i] = 'settle' THEN 'settle' ELSE 'void' END, h.mode,
                amount, p_rids[i], h.key_id, h.tool, '', h.reason, 0, '', p_ats[i]);
            o_outcome := 'ok';
            o_state := h.state;
            o_available := ledger_available(a, h.mode);
        END IF;
        RETURN NEXT;
    END LOOP;
    IF cardinality(es) = 0 THEN
        RETURN;
    END IF;
    acct_rows[cur] := a;
    INSERT INTO entries SELECT (e).* FROM unnest(es) e;
    INSERT INTO holds SELECT (hs[g]).* FROM generate_subscripts(hs, 1) g WHERE fresh[g];
    SELECT count(*) INTO want FROM generate_subscripts(hs, 1) g WHERE changed[g] AND NOT fresh[g];
    IF want > 0 THEN
        -- Planned for these very arrays each time (EXECUTE): a plan cached while the table was
        -- small would scan an account's holds instead of looking each one up.
        EXECUTE 'UPDATE holds t SET state = u.state, resolved = u.resolved, resolve_seq = u.resolve_seq,
                reason = u.reason
            FROM unnest($1) u
            WHERE t.account_id = u.account_id AND t.request_id = u.request_id AND t.state = ''open'''
        USING ARRAY(SELECT hs[g] FROM generate_subscripts(hs, 1) g WHERE changed[g] AND NOT fresh[g]);
        GET DIAGNOSTICS got = ROW_COUNT;
        IF got <> want THEN
            RAISE EXCEPTION 'ledger_holds: % of % holds were resolved already', want - got, want;
        END IF;
    END IF;
    FOR k IN 1 .. cardinality(acct_rows) LOOP
        IF acct_rows[k].next_seq <> firsts[k] THEN
            PERFORM ledger_save(acct_rows[k]);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- ledger_hold runs one hold operation, as ledger_holds does for arrays of one, with the same
-- outcomes, in a few statements whose plans plpgsql keeps: the account's lock, the hold's
-- lookup (on data committed before the lock, as each statement takes a new snapshot), and one
-- statement for all the writes. The group committer sends a lone hold operation here: at one
-- caller that is every operation, and what ledger_holds spends on its arrays would be most of a
-- hold's time.
-- +goose StatementBegin
CREATE FUNCTION ledger_hold(p_account text, p_at bigint, p_op text, p_rid text, p_mode text, p_key text,
    p_tool text, p_expires bigint, p_reason text, OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    found_hold boolean;
    delta bigint;
    n bigint;
BEGIN
    o_state := '';
    o_available := 0;
    SELECT * INTO a FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    SELECT * INTO h FROM holds WHERE account_id = p_account AND request_id = p_rid;
    found_hold := FOUND;
    IF p_op = 'hold' THEN
        IF found_hold THEN
            o_outcome := 'repeated';
            o_state := h.state;
            o_available := ledger_available(a, h.mode);
        ELSIF a.status <> 'active' THEN
            o_outcome := 'disabled';
        ELSIF ledger_available(a, p_mode) < 1 THEN
            o_outcome := 'insufficient';
        ELSE
            a := ledger_change(a, p_mode, 0, 1);
            WITH nh AS (
                INSERT INTO holds VALUES (p_account, p_rid, p_mode, 'open', p_key, p_tool, p_at, p_expires,
                    a.next_seq - 1, NULL, NULL, '')
            ), ne AS (
                INSERT INTO entries
                SELECT (ledger_entry(a, 'hold', p_mode, 0, p_rid, p_key, p_tool, '', '', 0, '', p_at)).*
            )
            UPDATE accounts SET held = a.held, test_held = a.test_held, next_seq = a.next_seq
            WHERE id = p_account;
            o_outcome := 'ok';
            o_state := 'open';
            o_available := ledger_available(a, p_mode);
        END IF;
        RETURN;
    END IF;
    IF NOT found_hold THEN
        o_outcome := 'no_hold';
    ELSIF h.state <> 'open' OR (p_op = 'expire' AND h.expires > p_at) THEN
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
    ELSE
        delta := CASE WHEN p_op = 'settle' THEN -1 ELSE 0 END;
        a := ledger_change(a, h.mode, delta, -1);
        h.state := CASE WHEN p_op = 'settle' THEN 'settled' ELSE 'voided' END;
        h.reason := CASE p_op WHEN 'settle' THEN '' WHEN 'expire' THEN 'expired' ELSE p_reason END;
        -- Conditional on state = 'open' like ledger_holds' update, and nothing is written (and
        -- the call raises) if the hold turns out resolved already.
        WITH r AS (
            UPDATE holds SET state = h.state, resolved = p_at, resolve_seq = a.next_seq - 1, reason = h.reason
            WHERE account_id = p_account AND request_id = p_rid AND state = 'open'
            RETURNING 1
        ), ne AS (
            INSERT INTO entries
            SELECT (ledger_entry(a, CASE WHEN p_op = 'settle' THEN 'settle' ELSE 'void' END, h.mode, delta,
                p_rid, h.key_id, h.tool, '', h.reason, 0, '', p_at)).*
            FROM r
        )
        UPDATE accounts SET balance = a.balance, held = a.held, test_balance = a.test_balance,
            test_held = a.test_held, next_seq = a.next_seq
        WHERE id = p_account AND EXISTS (SELECT FROM r);
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n <> 1 THEN
            RAISE EXCEPTION 'ledger_hold: hold % of account % was resolved already', p_rid, p_account;
        END IF;
        o_outcome := 'ok';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
    END IF;
END
$$;
-- +goose StatementEnd

-- ledger_grant adds credits (grant, purchase) or adds or removes them (adjustment). A reference
-- already used on the account credits nothing and returns the first entry (repeated); the
-- unique index entries_reference backs this up.
-- +goose StatementBegin
CREATE FUNCTION ledger_grant(p_account text, p_mode text, p_kind text, p_credits bigint, p_reference text,
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
    IF ledger_available(o_account, p_mode) + p_credits < 0 THEN
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

-- ledger_refill tops the account's available test credits up to p_upto with a grant (one
-- without a reference: the account's lock makes the check and the grant one step).
-- +goose StatementBegin
CREATE FUNCTION ledger_refill(p_account text, p_upto bigint, p_at bigint,
    OUT o_outcome text, OUT o_credits bigint, OUT o_account accounts)
LANGUAGE plpgsql AS $$
BEGIN
    o_account := ledger_lock(p_account);
    IF o_account.status IS DISTINCT FROM 'active' THEN
        o_outcome := CASE WHEN o_account.id IS NULL THEN 'not_found' ELSE 'disabled' END;
        RETURN;
    END IF;
    o_outcome := 'ok';
    o_credits := greatest(p_upto - ledger_available(o_account, 'test'), 0);
    IF o_credits > 0 THEN
        o_account := (SELECT g.o_account
            FROM ledger_grant(p_account, 'test', 'grant', o_credits, '', 'test credit refill', 0, '', p_at) g);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ledger_refill, ledger_grant, ledger_hold, ledger_holds, ledger_hold_key, ledger_save, ledger_lock, ledger_entry,
    ledger_change, ledger_available;
DROP TABLE idempotency, sessions, credentials, api_keys, holds, entries, accounts;
