-- Organisations: accounts whose members (other accounts, each a login of its own) share the
-- organisation's credits, with a role each and an optional monthly credit cap.
--
-- memberships: one row per (organisation, member). An account is an organisation once it has
-- rows here as org_id; the account that became it is its first owner (member_id = org_id).
-- A pending row is an invitation not accepted yet: it grants nothing.
-- member_usage: live credits a member's keys took in one UTC calendar month ('YYYY-MM'): one
-- more with every hold, one less with its void or expiry, so that it is the credits settled and
-- still held. It changes in the same transaction as the hold, under the organisation's account
-- row lock, so holds on every instance see one count.
-- api_keys.member_id: the member who made the key ('' for the account's own keys, which are its
-- first owner's). accounts.organisation: the account has members, so that a hold of a personal
-- account, which the hold functions have locked already, looks up nothing more.

-- +goose Up
ALTER TABLE accounts ADD COLUMN organisation boolean NOT NULL DEFAULT false;
ALTER TABLE api_keys ADD COLUMN member_id text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX api_keys_member ON api_keys (account_id, member_id) WHERE member_id <> '';

CREATE TABLE memberships (
    org_id      text COLLATE "C" NOT NULL REFERENCES accounts (id),
    member_id   text COLLATE "C" NOT NULL REFERENCES accounts (id),
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    monthly_cap bigint NOT NULL DEFAULT 0 CHECK (monthly_cap >= 0),
    pending     boolean NOT NULL DEFAULT false,
    created     bigint NOT NULL,
    PRIMARY KEY (org_id, member_id)
);
CREATE INDEX memberships_member ON memberships (member_id);

CREATE TABLE member_usage (
    org_id    text COLLATE "C" NOT NULL REFERENCES accounts (id),
    member_id text COLLATE "C" NOT NULL,
    month     text COLLATE "C" NOT NULL,
    used      bigint NOT NULL CHECK (used >= 0),
    PRIMARY KEY (org_id, member_id, month)
);

-- ledger_month is the UTC calendar month ('YYYY-MM') of p_at (unix nanoseconds), as Go's
-- t.UTC().Format("2006-01").
-- +goose StatementBegin
CREATE FUNCTION ledger_month(p_at bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(to_timestamp(p_at / 1000000000) AT TIME ZONE 'UTC', 'YYYY-MM')
$$;
-- +goose StatementEnd

-- ledger_key_member is the member whose key p_key of account p_account is: the key's member, or
-- the account itself for its own keys and for an unknown key.
-- +goose StatementBegin
CREATE FUNCTION ledger_key_member(p_account text, p_key text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT nullif(member_id, '') FROM api_keys WHERE id = p_key AND account_id = p_account), p_account)
$$;
-- +goose StatementEnd

-- ledger_member_take counts one live credit held by key p_key of organisation a (its locked
-- row) against its member's month, and is false (writing nothing) when the member's monthly cap
-- is reached. A personal account, a test credit, a hold without a key or a key of no (accepted)
-- member counts nothing and is true. Called by the hold operations with the account's row locked.
-- +goose StatementBegin
CREATE FUNCTION ledger_member_take(a accounts, p_key text, p_mode text, p_at bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_member text;
    v_cap bigint;
    v_n bigint;
BEGIN
    IF NOT a.organisation OR p_mode <> 'live' OR p_key = '' THEN
        RETURN true;
    END IF;
    v_member := ledger_key_member(a.id, p_key);
    SELECT monthly_cap INTO v_cap FROM memberships
    WHERE org_id = a.id AND member_id = v_member AND NOT pending;
    IF NOT FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO member_usage AS u VALUES (a.id, v_member, ledger_month(p_at), 1)
    ON CONFLICT (org_id, member_id, month) DO UPDATE SET used = u.used + 1
    WHERE v_cap = 0 OR u.used < v_cap;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n = 1;
END
$$;
-- +goose StatementEnd

-- ledger_member_give gives back what ledger_member_take counted for a hold of key p_key of
-- account a taken at p_created (unix nanoseconds) that is now resolved by p_op: a void or an
-- expiry gives the credit back to the month of the hold; a settle keeps it counted.
-- +goose StatementBegin
CREATE FUNCTION ledger_member_give(a accounts, p_key text, p_mode text, p_created bigint, p_op text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT a.organisation OR p_op = 'settle' OR p_mode <> 'live' OR p_key = '' THEN
        RETURN;
    END IF;
    UPDATE member_usage SET used = used - 1
    WHERE org_id = a.id AND member_id = ledger_key_member(a.id, p_key) AND month = ledger_month(p_created) AND used > 0;
END
$$;
-- +goose StatementEnd

-- The hold operations of 00009 (the key's budget), with the member's monthly cap: a hold that the
-- key's budget allows and the member's cap refuses is 'member_cap' (the key's count given back at
-- once), and a void or expiry gives its count back. The down step restores 00009's.
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
                ELSIF NOT ledger_member_take(a, p_keys[i], p_modes[i], p_ats[i]) THEN
                    -- The member's cap refuses what the key's budget just counted: give it back.
                    PERFORM ledger_key_release(a.id, p_keys[i], p_ats[i]);
                    o_outcome := 'member_cap';
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
            PERFORM ledger_member_give(a, h.key_id, h.mode, h.created, p_ops[i]);
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
            IF NOT ledger_member_take(a, p_key, p_mode, p_at) THEN
                -- The member's cap refuses what the key's budget just counted: give it back.
                PERFORM ledger_key_release(p_account, p_key, p_at);
                o_outcome := 'member_cap';
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
        PERFORM ledger_member_give(a, h.key_id, h.mode, h.created, p_op);
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

DROP FUNCTION ledger_member_give, ledger_member_take, ledger_key_member, ledger_month;
DROP TABLE member_usage;
DROP TABLE memberships;
DROP INDEX api_keys_member;
ALTER TABLE api_keys DROP COLUMN member_id;
ALTER TABLE accounts DROP COLUMN organisation;
