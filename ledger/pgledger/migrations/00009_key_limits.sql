-- Keys with limits and key rolls (ledger/keylimits.go, postgres_keylimits.go).
--
-- A key's limits are columns of api_keys (0 or an empty array: none). What it has spent is a
-- row of api_key_usage, made at its first hold, changed only by ledger_hold and ledger_holds
-- under the lock of the key's account (so every change of one key's count is ordered with its
-- account's, on every instance, and no other statement takes these rows' locks). A roll keeps
-- the replaced secret's digest in prev_digest until prev_until. Existing keys have no limits,
-- no usage row and no previous secret.

-- +goose Up
ALTER TABLE api_keys
    ADD COLUMN note          text NOT NULL DEFAULT '',
    ADD COLUMN budget_total  bigint NOT NULL DEFAULT 0 CHECK (budget_total >= 0),
    ADD COLUMN budget_day    bigint NOT NULL DEFAULT 0 CHECK (budget_day >= 0),
    ADD COLUMN budget_month  bigint NOT NULL DEFAULT 0 CHECK (budget_month >= 0),
    ADD COLUMN allowed_tools text[] NOT NULL DEFAULT '{}',
    ADD COLUMN allowed_cidrs text[] NOT NULL DEFAULT '{}',
    ADD COLUMN rolled        bigint,
    ADD COLUMN prev_digest   bytea UNIQUE,
    ADD COLUMN prev_last4    text NOT NULL DEFAULT '',
    ADD COLUMN prev_until    bigint;

-- day and month count the UTC day and month that start at day_start and month_start (unix
-- nanoseconds; 0: none yet).
CREATE TABLE api_key_usage (
    key_id      text COLLATE "C" PRIMARY KEY REFERENCES api_keys (id),
    total       bigint NOT NULL DEFAULT 0 CHECK (total >= 0),
    day         bigint NOT NULL DEFAULT 0 CHECK (day >= 0),
    day_start   bigint NOT NULL DEFAULT 0,
    month       bigint NOT NULL DEFAULT 0 CHECK (month >= 0),
    month_start bigint NOT NULL DEFAULT 0
);

-- ledger_day_start and ledger_month_start are the UTC day and month that hold p_at.
-- +goose StatementBegin
CREATE FUNCTION ledger_day_start(p_at bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (floor(p_at / 86400000000000.0) * 86400000000000)::bigint
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_month_start(p_at bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (extract(epoch FROM date_trunc('month', to_timestamp(floor(p_at / 1000000000.0)) AT TIME ZONE 'UTC'))
        * 1000000000)::bigint
$$;
-- +goose StatementEnd

-- ledger_key_charge counts a hold at p_at against key p_key of account p_account, whose row the
-- caller has locked. It returns 'ok' (counted, or no such key of the account), or which budget
-- has no room ('key_budget_total', 'key_budget_month', 'key_budget_day', the one that resets
-- last first) with that budget in o_limit, and then counts nothing.
-- +goose StatementBegin
CREATE FUNCTION ledger_key_charge(p_account text, p_key text, p_at bigint, OUT o_outcome text, OUT o_limit bigint)
LANGUAGE plpgsql AS $$
DECLARE
    k api_keys;
    u api_key_usage;
    d bigint;
    m bigint;
BEGIN
    o_outcome := 'ok';
    o_limit := 0;
    IF p_key = '' THEN
        RETURN;
    END IF;
    SELECT * INTO k FROM api_keys WHERE id = p_key AND account_id = p_account;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO u FROM api_key_usage WHERE key_id = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO api_key_usage (key_id) VALUES (p_key) RETURNING * INTO u;
    END IF;
    d := ledger_day_start(p_at);
    m := ledger_month_start(p_at);
    IF u.day_start <> d THEN
        u.day := 0;
    END IF;
    IF u.month_start <> m THEN
        u.month := 0;
    END IF;
    IF k.budget_total > 0 AND u.total >= k.budget_total THEN
        o_outcome := 'key_budget_total';
        o_limit := k.budget_total;
    ELSIF k.budget_month > 0 AND u.month >= k.budget_month THEN
        o_outcome := 'key_budget_month';
        o_limit := k.budget_month;
    ELSIF k.budget_day > 0 AND u.day >= k.budget_day THEN
        o_outcome := 'key_budget_day';
        o_limit := k.budget_day;
    ELSE
        UPDATE api_key_usage SET total = u.total + 1, day = u.day + 1, day_start = d, month = u.month + 1,
            month_start = m
        WHERE key_id = p_key;
    END IF;
END
$$;
-- +goose StatementEnd

-- ledger_key_release gives back the count of a hold of key p_key made at p_created (a void): to
-- the total, and to the day and month only while the key's counts are still those of the
-- hold's day and month. No count goes below zero.
-- +goose StatementBegin
CREATE FUNCTION ledger_key_release(p_account text, p_key text, p_created bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE api_key_usage SET total = greatest(total - 1, 0),
        day = CASE WHEN day_start = ledger_day_start(p_created) THEN greatest(day - 1, 0) ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(p_created) THEN greatest(month - 1, 0) ELSE month END
    WHERE key_id = p_key AND p_key <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = p_key AND account_id = p_account)
$$;
-- +goose StatementEnd

-- ledger_holds and ledger_hold as 00001 made them, and: a hold that names a key of the account
-- is counted against the key's budgets (ledger_key_charge) after the account's credit is found
-- available and before anything is written; a key without room refuses it with the budget's
-- outcome (key_budget_total, key_budget_month, key_budget_day) and the budget in o_available,
-- and writes nothing. A void or expiry gives the key's count back (ledger_key_release); a
-- settle keeps it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_holds(p_accounts text[], p_ats bigint[], p_ops text[], p_rids text[], p_modes text[],
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
    kc record;
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
                SELECT * INTO kc FROM ledger_key_charge(a.id, p_keys[i], p_ats[i]);
                IF kc.o_outcome <> 'ok' THEN
                    o_outcome := kc.o_outcome;
                    o_available := kc.o_limit;
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
            IF p_ops[i] <> 'settle' THEN
                PERFORM ledger_key_release(a.id, h.key_id, h.created);
            END IF;
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_hold(p_account text, p_at bigint, p_op text, p_rid text, p_mode text, p_key text,
    p_tool text, p_expires bigint, p_reason text, OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    found_hold boolean;
    delta bigint;
    n bigint;
    kc record;
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
            SELECT * INTO kc FROM ledger_key_charge(p_account, p_key, p_at);
            IF kc.o_outcome <> 'ok' THEN
                o_outcome := kc.o_outcome;
                o_available := kc.o_limit;
                RETURN;
            END IF;
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
        IF p_op <> 'settle' THEN
            PERFORM ledger_key_release(p_account, h.key_id, h.created);
        END IF;
        o_outcome := 'ok';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_holds(p_accounts text[], p_ats bigint[], p_ops text[], p_rids text[], p_modes text[],
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_hold(p_account text, p_at bigint, p_op text, p_rid text, p_mode text, p_key text,
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

DROP FUNCTION ledger_key_release, ledger_key_charge, ledger_month_start, ledger_day_start;
DROP TABLE api_key_usage;
ALTER TABLE api_keys DROP COLUMN note, DROP COLUMN budget_total, DROP COLUMN budget_day, DROP COLUMN budget_month,
    DROP COLUMN allowed_tools, DROP COLUMN allowed_cidrs, DROP COLUMN rolled, DROP COLUMN prev_digest,
    DROP COLUMN prev_last4, DROP COLUMN prev_until;
