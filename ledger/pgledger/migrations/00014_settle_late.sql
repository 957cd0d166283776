-- A settle decided while its hold was alive that reaches the database only after a sweep voided
-- the hold as expired (its instance, or the database, stalled in between): ledger_settle_late
-- charges the hold after all, once. It adds an entry of kind settle (balance -1, the open holds
-- as they are: the void closed the hold) with reason 'delivered before the hold expired', marks
-- the hold settled, and takes again the key's and the member's counts that the void gave back.
-- Outcomes as ledger_hold's: 'ok' (charged now), 'repeated' (left as it is: not voided by the
-- sweep, decided too late, settled already, or the credit the void gave back is spent),
-- 'not_found', 'no_hold'. Several instances may call it at once: the account's row is locked
-- first, so a hold is charged at most once.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION ledger_settle_late(p_account text, p_rid text, p_decided bigint, p_at bigint,
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

-- +goose Down
DROP FUNCTION ledger_settle_late;
