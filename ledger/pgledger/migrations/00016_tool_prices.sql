-- Tools have prices (a tool block's `credits`): a hold reserves the request's price, not one
-- credit, and its settle charges it. holds.credits is what a hold reserved; entries.credits is,
-- on a hold and on the settle or void that resolves it, that same figure (0 on every other entry,
-- and on the entries written before prices existed, whose holds reserved one: ledger.HeldCredits).
-- Verify sums them. The key's budget and the member's cap count credits, so the functions that
-- count them take the hold's credits; ledger_holds and ledger_hold take one more argument, the
-- price of each hold. The functions whose arguments change are dropped and made anew (their
-- names stay); the down step restores those of 00001, 00010 and 00015.

-- +goose Up
ALTER TABLE holds ADD COLUMN credits bigint NOT NULL DEFAULT 1 CHECK (credits > 0);
ALTER TABLE entries ADD COLUMN credits bigint NOT NULL DEFAULT 0 CHECK (credits >= 0);

DROP FUNCTION ledger_holds(text[], bigint[], text[], text[], text[], text[], text[], bigint[], text[]);
DROP FUNCTION ledger_hold(text, bigint, text, text, text, text, text, bigint, text);
DROP FUNCTION ledger_member_take(accounts, text, text, bigint);
DROP FUNCTION ledger_member_give(accounts, text, text, bigint, text);
DROP FUNCTION ledger_key_charge(text, text, bigint);
DROP FUNCTION ledger_key_release(text, text, bigint);

-- +goose StatementBegin
CREATE FUNCTION ledger_entry(a accounts, p_kind text, p_mode text, p_amount bigint, p_request text,
    p_key text, p_tool text, p_reference text, p_reason text, p_cents bigint, p_currency text,
    p_at bigint, p_credits bigint) RETURNS entries
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(a.id, a.next_seq - 1, p_kind, p_mode, p_amount,
        CASE WHEN p_mode = 'live' THEN a.balance ELSE a.test_balance END, ledger_available(a, p_mode),
        p_request, p_key, p_tool, p_reference, p_reason, p_cents, p_currency, p_at, p_credits)::entries
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_entry(a accounts, p_kind text, p_mode text, p_amount bigint, p_request text,
    p_key text, p_tool text, p_reference text, p_reason text, p_cents bigint, p_currency text,
    p_at bigint) RETURNS entries
LANGUAGE sql IMMUTABLE AS $$
    SELECT ledger_entry(a, p_kind, p_mode, p_amount, p_request, p_key, p_tool, p_reference, p_reason, p_cents,
        p_currency, p_at, 0)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_key_charge(p_account text, p_key text, p_at bigint, p_credits bigint, OUT o_outcome text, OUT o_limit bigint)
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
    IF NOT FOUND OR (k.budget_total = 0 AND k.budget_day = 0 AND k.budget_month = 0) THEN
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
    IF k.budget_total > 0 AND u.total + p_credits > k.budget_total THEN
        o_outcome := 'key_budget_total';
        o_limit := k.budget_total;
    ELSIF k.budget_month > 0 AND u.month + p_credits > k.budget_month THEN
        o_outcome := 'key_budget_month';
        o_limit := k.budget_month;
    ELSIF k.budget_day > 0 AND u.day + p_credits > k.budget_day THEN
        o_outcome := 'key_budget_day';
        o_limit := k.budget_day;
    ELSE
        UPDATE api_key_usage SET total = u.total + p_credits, day = u.day + p_credits, day_start = d, month = u.month + p_credits,
            month_start = m
        WHERE key_id = p_key;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_key_release(p_account text, p_key text, p_created bigint, p_credits bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE api_key_usage SET total = greatest(total - p_credits, 0),
        day = CASE WHEN day_start = ledger_day_start(p_created) THEN greatest(day - p_credits, 0) ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(p_created) THEN greatest(month - p_credits, 0) ELSE month END
    WHERE key_id = p_key AND p_key <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = p_key AND account_id = p_account
            AND (budget_total > 0 OR budget_day > 0 OR budget_month > 0))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_member_take(a accounts, p_key text, p_mode text, p_at bigint, p_credits bigint) RETURNS boolean
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
    INSERT INTO member_usage AS u VALUES (a.id, v_member, ledger_month(p_at), p_credits)
    ON CONFLICT (org_id, member_id, month) DO UPDATE SET used = u.used + p_credits
    WHERE v_cap = 0 OR u.used + p_credits <= v_cap;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n = 1;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_member_give(a accounts, p_key text, p_mode text, p_created bigint, p_op text, p_credits bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT a.organisation OR p_op = 'settle' OR p_mode <> 'live' OR p_key = '' THEN
        RETURN;
    END IF;
    UPDATE member_usage SET used = greatest(used - p_credits, 0)
    WHERE org_id = a.id AND member_id = ledger_key_member(a.id, p_key) AND month = ledger_month(p_created) AND used > 0;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_settle_late(p_account text, p_rid text, p_decided bigint, p_at bigint,
    OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    n bigint;
BEGIN
    o_state := '';
    o_available := 0;
    a := ledger_lock(p_account);
    IF a.id IS NULL THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    SELECT * INTO h FROM holds WHERE account_id = p_account AND request_id = p_rid;
    IF NOT FOUND THEN
        o_outcome := 'no_hold';
        RETURN;
    END IF;
    IF h.state <> 'voided' OR h.reason <> 'expired' OR p_decided <= 0 OR p_decided >= h.expires
        OR ledger_available(a, h.mode) < h.credits THEN
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        RETURN;
    END IF;
    a := ledger_change(a, h.mode, -h.credits, 0);
    UPDATE holds SET state = 'settled', resolved = p_at, resolve_seq = a.next_seq - 1,
        reason = 'delivered before the hold expired'
    WHERE account_id = p_account AND request_id = p_rid AND state = 'voided';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> 1 THEN
        RAISE EXCEPTION 'ledger_settle_late: hold % of account % changed meanwhile', p_rid, p_account;
    END IF;
    INSERT INTO entries
    SELECT (ledger_entry(a, 'settle', h.mode, -h.credits, p_rid, h.key_id, h.tool, '', 'delivered before the hold expired',
        0, '', p_at, h.credits)).*;
    PERFORM ledger_save(a);
    UPDATE api_key_usage SET total = total + h.credits,
        day = CASE WHEN day_start = ledger_day_start(h.created) THEN day + h.credits ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(h.created) THEN month + h.credits ELSE month END
    WHERE key_id = h.key_id AND h.key_id <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = h.key_id AND account_id = p_account
            AND (budget_total > 0 OR budget_day > 0 OR budget_month > 0));
    IF a.organisation AND h.mode = 'live' AND h.key_id <> '' THEN
        UPDATE member_usage SET used = used + h.credits
        WHERE org_id = a.id AND member_id = ledger_key_member(a.id, h.key_id) AND month = ledger_month(h.created);
    END IF;
    o_outcome := 'ok';
    o_state := 'settled';
    o_available := ledger_available(a, h.mode);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_key_count_from(p_account text, p_key text, p_at bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO api_key_usage AS u (key_id, total, day, day_start, month, month_start)
    SELECT p_key, coalesce(sum(h.credits), 0),
        coalesce(sum(h.credits) FILTER (WHERE ledger_day_start(h.created) = ledger_day_start(p_at)), 0),
        ledger_day_start(p_at),
        coalesce(sum(h.credits) FILTER (WHERE ledger_month_start(h.created) = ledger_month_start(p_at)), 0),
        ledger_month_start(p_at)
    FROM holds h
    WHERE h.account_id = p_account AND h.key_id = p_key AND h.state = 'open'
    ON CONFLICT (key_id) DO UPDATE SET total = excluded.total, day = excluded.day, day_start = excluded.day_start,
        month = excluded.month, month_start = excluded.month_start
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ledger_holds(p_accounts text[], p_ats bigint[], p_ops text[], p_rids text[], p_modes text[],
    p_keys text[], p_tools text[], p_expires bigint[], p_reasons text[], p_credits bigint[])
RETURNS TABLE (o_outcome text, o_state text, o_available bigint, o_credits bigint)
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
        o_credits := 0;
        IF a.id IS NULL THEN
            o_outcome := 'not_found';
        ELSIF p_ops[i] = 'hold' THEN
            IF j IS NOT NULL THEN
                o_outcome := 'repeated';
                o_state := hs[j].state;
                o_available := ledger_available(a, hs[j].mode);
                o_credits := hs[j].credits;
            ELSIF a.status <> 'active' THEN
                o_outcome := 'disabled';
            ELSIF ledger_available(a, p_modes[i]) < p_credits[i] THEN
                o_outcome := 'insufficient';
            ELSE
                SELECT * INTO kc FROM ledger_key_charge(a.id, p_keys[i], p_ats[i], p_credits[i]);
                IF kc.o_outcome <> 'ok' THEN
                    o_outcome := kc.o_outcome;
                    o_available := kc.o_limit;
                ELSIF NOT ledger_member_take(a, p_keys[i], p_modes[i], p_ats[i], p_credits[i]) THEN
                    -- The member's cap refuses what the key's budget just counted: give it back.
                    PERFORM ledger_key_release(a.id, p_keys[i], p_ats[i], p_credits[i]);
                    o_outcome := 'member_cap';
                ELSE
                    a := ledger_change(a, p_modes[i], 0, p_credits[i]);
                    es := es || ledger_entry(a, 'hold', p_modes[i], 0, p_rids[i], p_keys[i], p_tools[i], '', '', 0, '', p_ats[i],
                        p_credits[i]);
                    hs := hs || ROW(a.id, p_rids[i], p_modes[i], 'open', p_keys[i], p_tools[i], p_ats[i], p_expires[i],
                        a.next_seq - 1, NULL, NULL, '', p_credits[i])::holds;
                    hkeys := hkeys || ledger_hold_key(a.id, p_rids[i]);
                    fresh := fresh || true;
                    changed := changed || false;
                    o_outcome := 'ok';
                    o_state := 'open';
                    o_available := ledger_available(a, p_modes[i]);
                    o_credits := p_credits[i];
                END IF;
            END IF;
        ELSIF j IS NULL THEN
            o_outcome := 'no_hold';
        ELSIF hs[j].state <> 'open' OR (p_ops[i] = 'expire' AND hs[j].expires > p_ats[i]) THEN
            o_outcome := 'repeated';
            o_state := hs[j].state;
            o_available := ledger_available(a, hs[j].mode);
            o_credits := hs[j].credits;
        ELSE
            h := hs[j];
            amount := CASE WHEN p_ops[i] = 'settle' THEN -h.credits ELSE 0 END;
            a := ledger_change(a, h.mode, amount, -h.credits);
            PERFORM ledger_member_give(a, h.key_id, h.mode, h.created, p_ops[i], h.credits);
            h.state := CASE WHEN p_ops[i] = 'settle' THEN 'settled' ELSE 'voided' END;
            h.resolved := p_ats[i];
            h.resolve_seq := a.next_seq - 1;
            h.reason := CASE p_ops[i] WHEN 'settle' THEN '' WHEN 'expire' THEN 'expired' ELSE p_reasons[i] END;
            hs[j] := h;
            changed[j] := true;
            IF p_ops[i] <> 'settle' THEN
                PERFORM ledger_key_release(a.id, h.key_id, h.created, h.credits);
            END IF;
            es := es || ledger_entry(a, CASE WHEN p_ops[i] = 'settle' THEN 'settle' ELSE 'void' END, h.mode,
                amount, p_rids[i], h.key_id, h.tool, '', h.reason, 0, '', p_ats[i], h.credits);
            o_outcome := 'ok';
            o_state := h.state;
            o_available := ledger_available(a, h.mode);
            o_credits := h.credits;
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
CREATE FUNCTION ledger_hold(p_account text, p_at bigint, p_op text, p_rid text, p_mode text, p_key text,
    p_tool text, p_expires bigint, p_reason text, p_credits bigint, OUT o_outcome text, OUT o_state text, OUT o_available bigint, OUT o_credits bigint)
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
    o_credits := 0;
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
            o_credits := h.credits;
        ELSIF a.status <> 'active' THEN
            o_outcome := 'disabled';
        ELSIF ledger_available(a, p_mode) < p_credits THEN
            o_outcome := 'insufficient';
        ELSE
            SELECT * INTO kc FROM ledger_key_charge(p_account, p_key, p_at, p_credits);
            IF kc.o_outcome <> 'ok' THEN
                o_outcome := kc.o_outcome;
                o_available := kc.o_limit;
                RETURN;
            END IF;
            IF NOT ledger_member_take(a, p_key, p_mode, p_at, p_credits) THEN
                -- The member's cap refuses what the key's budget just counted: give it back.
                PERFORM ledger_key_release(p_account, p_key, p_at, p_credits);
                o_outcome := 'member_cap';
                RETURN;
            END IF;
            a := ledger_change(a, p_mode, 0, p_credits);
            WITH nh AS (
                INSERT INTO holds VALUES (p_account, p_rid, p_mode, 'open', p_key, p_tool, p_at, p_expires,
                    a.next_seq - 1, NULL, NULL, '', p_credits)
            ), ne AS (
                INSERT INTO entries
                SELECT (ledger_entry(a, 'hold', p_mode, 0, p_rid, p_key, p_tool, '', '', 0, '', p_at, p_credits)).*
            )
            UPDATE accounts SET held = a.held, test_held = a.test_held, next_seq = a.next_seq
            WHERE id = p_account;
            o_outcome := 'ok';
            o_state := 'open';
            o_available := ledger_available(a, p_mode);
            o_credits := p_credits;
        END IF;
        RETURN;
    END IF;
    IF NOT found_hold THEN
        o_outcome := 'no_hold';
    ELSIF h.state <> 'open' OR (p_op = 'expire' AND h.expires > p_at) THEN
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        o_credits := h.credits;
    ELSE
        delta := CASE WHEN p_op = 'settle' THEN -h.credits ELSE 0 END;
        a := ledger_change(a, h.mode, delta, -h.credits);
        PERFORM ledger_member_give(a, h.key_id, h.mode, h.created, p_op, h.credits);
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
                p_rid, h.key_id, h.tool, '', h.reason, 0, '', p_at, h.credits)).*
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
            PERFORM ledger_key_release(p_account, h.key_id, h.created, h.credits);
        END IF;
        o_outcome := 'ok';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        o_credits := h.credits;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ledger_holds(text[], bigint[], text[], text[], text[], text[], text[], bigint[], text[], bigint[]);
DROP FUNCTION ledger_hold(text, bigint, text, text, text, text, text, bigint, text, bigint);
DROP FUNCTION ledger_member_take(accounts, text, text, bigint, bigint);
DROP FUNCTION ledger_member_give(accounts, text, text, bigint, text, bigint);
DROP FUNCTION ledger_key_charge(text, text, bigint, bigint);
DROP FUNCTION ledger_key_release(text, text, bigint, bigint);
DROP FUNCTION ledger_entry(accounts, text, text, bigint, text, text, text, text, text, bigint, text, bigint, bigint);
ALTER TABLE entries DROP COLUMN credits;
ALTER TABLE holds DROP COLUMN credits;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_entry(a accounts, p_kind text, p_mode text, p_amount bigint, p_request text,
    p_key text, p_tool text, p_reference text, p_reason text, p_cents bigint, p_currency text,
    p_at bigint) RETURNS entries
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(a.id, a.next_seq - 1, p_kind, p_mode, p_amount,
        CASE WHEN p_mode = 'live' THEN a.balance ELSE a.test_balance END, ledger_available(a, p_mode),
        p_request, p_key, p_tool, p_reference, p_reason, p_cents, p_currency, p_at)::entries
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_key_charge(p_account text, p_key text, p_at bigint, OUT o_outcome text, OUT o_limit bigint)
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
    IF NOT FOUND OR (k.budget_total = 0 AND k.budget_day = 0 AND k.budget_month = 0) THEN
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_key_release(p_account text, p_key text, p_created bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE api_key_usage SET total = greatest(total - 1, 0),
        day = CASE WHEN day_start = ledger_day_start(p_created) THEN greatest(day - 1, 0) ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(p_created) THEN greatest(month - 1, 0) ELSE month END
    WHERE key_id = p_key AND p_key <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = p_key AND account_id = p_account
            AND (budget_total > 0 OR budget_day > 0 OR budget_month > 0))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_member_take(a accounts, p_key text, p_mode text, p_at bigint) RETURNS boolean
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_member_give(a accounts, p_key text, p_mode text, p_created bigint, p_op text) RETURNS void
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_settle_late(p_account text, p_rid text, p_decided bigint, p_at bigint,
    OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    n bigint;
BEGIN
    o_state := '';
    o_available := 0;
    a := ledger_lock(p_account);
    IF a.id IS NULL THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    SELECT * INTO h FROM holds WHERE account_id = p_account AND request_id = p_rid;
    IF NOT FOUND THEN
        o_outcome := 'no_hold';
        RETURN;
    END IF;
    IF h.state <> 'voided' OR h.reason <> 'expired' OR p_decided <= 0 OR p_decided >= h.expires
        OR ledger_available(a, h.mode) < 1 THEN
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        RETURN;
    END IF;
    a := ledger_change(a, h.mode, -1, 0);
    UPDATE holds SET state = 'settled', resolved = p_at, resolve_seq = a.next_seq - 1,
        reason = 'delivered before the hold expired'
    WHERE account_id = p_account AND request_id = p_rid AND state = 'voided';
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> 1 THEN
        RAISE EXCEPTION 'ledger_settle_late: hold % of account % changed meanwhile', p_rid, p_account;
    END IF;
    INSERT INTO entries
    SELECT (ledger_entry(a, 'settle', h.mode, -1, p_rid, h.key_id, h.tool, '', 'delivered before the hold expired',
        0, '', p_at)).*;
    PERFORM ledger_save(a);
    UPDATE api_key_usage SET total = total + 1,
        day = CASE WHEN day_start = ledger_day_start(h.created) THEN day + 1 ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(h.created) THEN month + 1 ELSE month END
    WHERE key_id = h.key_id AND h.key_id <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = h.key_id AND account_id = p_account
            AND (budget_total > 0 OR budget_day > 0 OR budget_month > 0));
    IF a.organisation AND h.mode = 'live' AND h.key_id <> '' THEN
        UPDATE member_usage SET used = used + 1
        WHERE org_id = a.id AND member_id = ledger_key_member(a.id, h.key_id) AND month = ledger_month(h.created);
    END IF;
    o_outcome := 'ok';
    o_state := 'settled';
    o_available := ledger_available(a, h.mode);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_key_count_from(p_account text, p_key text, p_at bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO api_key_usage AS u (key_id, total, day, day_start, month, month_start)
    SELECT p_key, count(*), count(*) FILTER (WHERE ledger_day_start(h.created) = ledger_day_start(p_at)),
        ledger_day_start(p_at), count(*) FILTER (WHERE ledger_month_start(h.created) = ledger_month_start(p_at)),
        ledger_month_start(p_at)
    FROM holds h
    WHERE h.account_id = p_account AND h.key_id = p_key AND h.state = 'open'
    ON CONFLICT (key_id) DO UPDATE SET total = excluded.total, day = excluded.day, day_start = excluded.day_start,
        month = excluded.month, month_start = excluded.month_start
$$;
-- +goose StatementEnd

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

