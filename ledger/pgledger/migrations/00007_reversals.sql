-- Money that flows back (reversals.go): the payments that refunds and disputes name, the refunds
-- and disputes applied, once per id (the primary key, whichever instance receives the provider's
-- event), and the debt they may leave.
--
-- A refund or dispute of credits already spent takes the live balance below zero: the one way
-- it may, so the account keeps the credits that reversals took and did not give back
-- (reversed), and the check that kept balance >= held now keeps balance + reversed >= held: a
-- hold or charge still cannot take available credits below zero, only a reversal can.
--
-- ledger_grant is replaced by the same function that checks available credits only for what
-- takes credits away: a purchase or grant to an account in debt must credit (the webhook could
-- not take the payment otherwise), however small against the debt.

-- +goose Up
ALTER TABLE accounts ADD COLUMN reversed bigint NOT NULL DEFAULT 0;
ALTER TABLE accounts DROP CONSTRAINT accounts_available_not_negative;
ALTER TABLE accounts ADD CONSTRAINT accounts_available_not_negative
    CHECK (held >= 0 AND test_held >= 0 AND reversed >= 0 AND balance + reversed >= held AND test_balance >= test_held);

ALTER TABLE entries DROP CONSTRAINT entries_kind_check;
ALTER TABLE entries ADD CONSTRAINT entries_kind_check
    CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment', 'refund', 'dispute'));

-- One row per payment at the provider (a Stripe PaymentIntent), pending, paid or failed. No
-- foreign key on account_id: a paid session that credited nothing (unmatched_payments) may
-- name no account, and its refund must still be found.
CREATE TABLE payments (
    id               text COLLATE "C" PRIMARY KEY,
    reference        text COLLATE "C" NOT NULL,
    account_id       text COLLATE "C" NOT NULL DEFAULT '',
    package          text NOT NULL DEFAULT '',
    credits          bigint NOT NULL DEFAULT 0,
    amount_cents     bigint NOT NULL,
    currency         text NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    refunded_cents   bigint NOT NULL DEFAULT 0,
    refunded_credits bigint NOT NULL DEFAULT 0,
    disputed_credits bigint NOT NULL DEFAULT 0,
    created          bigint NOT NULL,
    updated          bigint NOT NULL,
    CHECK (refunded_credits >= 0 AND disputed_credits >= 0 AND refunded_credits + disputed_credits <= credits)
);
CREATE INDEX payments_account ON payments (account_id, created);
CREATE INDEX payments_reference ON payments (reference);

-- One row per refund or dispute id.
CREATE TABLE reversals (
    id           text COLLATE "C" PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('refund', 'dispute')),
    payment      text COLLATE "C" NOT NULL REFERENCES payments (id),
    account_id   text COLLATE "C" NOT NULL DEFAULT '',
    reference    text COLLATE "C" NOT NULL,
    amount_cents bigint NOT NULL,
    currency     text NOT NULL DEFAULT '',
    credits      bigint NOT NULL CHECK (credits >= 0),
    status       text NOT NULL CHECK (status IN ('applied', 'failed', 'open', 'won', 'lost')),
    reason       text NOT NULL DEFAULT '',
    event        text NOT NULL DEFAULT '',
    created      bigint NOT NULL,
    updated      bigint NOT NULL
);
CREATE INDEX reversals_updated ON reversals (updated);
CREATE INDEX reversals_account ON reversals (account_id, updated);

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

-- +goose Down
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
DROP TABLE reversals, payments;
ALTER TABLE entries DROP CONSTRAINT entries_kind_check;
ALTER TABLE entries ADD CONSTRAINT entries_kind_check
    CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment'));
ALTER TABLE accounts DROP CONSTRAINT accounts_available_not_negative;
ALTER TABLE accounts ADD CONSTRAINT accounts_available_not_negative
    CHECK (held >= 0 AND test_held >= 0 AND balance >= held AND test_balance >= test_held);
ALTER TABLE accounts DROP COLUMN reversed;
