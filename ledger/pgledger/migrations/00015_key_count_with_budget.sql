-- A key is counted only while it has a budget (ledger/keylimits.go): a hold, a void and a late
-- settle of a key without one (nearly every key) neither read nor write its api_key_usage row,
-- which stays as it was. ledger_key_charge, ledger_key_release and ledger_settle_late are
-- replaced with that rule; ledger_hold and ledger_holds call them as before.
--
-- ledger_key_count_from starts the count of a key on which a budget is set (UpdateKey of a key
-- that had none), under the lock of its account, which every hold takes first: the key's holds
-- open at that moment count as if they had been counted when they were made (the total, the
-- day and the month of p_at), so that their voids give back only what was counted.

-- +goose Up
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
CREATE FUNCTION ledger_key_count_from(p_account text, p_key text, p_at bigint) RETURNS void
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

-- +goose Down
DROP FUNCTION ledger_key_count_from;

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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_key_release(p_account text, p_key text, p_created bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE api_key_usage SET total = greatest(total - 1, 0),
        day = CASE WHEN day_start = ledger_day_start(p_created) THEN greatest(day - 1, 0) ELSE day END,
        month = CASE WHEN month_start = ledger_month_start(p_created) THEN greatest(month - 1, 0) ELSE month END
    WHERE key_id = p_key AND p_key <> ''
        AND EXISTS (SELECT FROM api_keys WHERE id = p_key AND account_id = p_account)
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
        AND EXISTS (SELECT FROM api_keys WHERE id = h.key_id AND account_id = p_account);
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
