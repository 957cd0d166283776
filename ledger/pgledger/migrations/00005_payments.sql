-- Payments that came in and credited nothing (payments.go), one row per reference at the payment
-- provider: the primary key makes a second row impossible, whichever instance receives the
-- provider's repeated event. No foreign key on account_id: the account a payment names may not
-- exist, which is one of the reasons it credited nothing. A row is never deleted; resolved is
-- NULL while the payment is open.

-- +goose Up
CREATE TABLE unmatched_payments (
    reference    text COLLATE "C" PRIMARY KEY,
    event        text COLLATE "C" NOT NULL DEFAULT '',
    account_id   text COLLATE "C" NOT NULL DEFAULT '',
    package      text NOT NULL DEFAULT '',
    credits      bigint NOT NULL DEFAULT 0,
    amount_cents bigint NOT NULL,
    currency     text NOT NULL,
    problem      text NOT NULL,
    detail       text NOT NULL DEFAULT '',
    created      bigint NOT NULL,
    resolved     bigint,
    resolution   text NOT NULL DEFAULT ''
);
CREATE INDEX unmatched_payments_created ON unmatched_payments (created);

-- +goose Down
DROP TABLE unmatched_payments;
