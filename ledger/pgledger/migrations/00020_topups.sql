-- Automatic top-ups (topups.go): per account its saved card and rule (topup_rules), and every
-- top-up made (topups). BeginTopUp locks the account's rule row while it counts the account's
-- top-ups and inserts a pending one, so of instances racing one inserts it; the unique partial
-- index topups_one_pending makes a second pending top-up of an account impossible whatever the
-- code does. Rows are kept for good. No card number is stored: the payment provider's ids, and
-- the card's brand and last four digits for display.

-- +goose Up
CREATE TABLE topup_rules (
    account_id        text COLLATE "C" PRIMARY KEY REFERENCES accounts (id),
    customer_id       text COLLATE "C" NOT NULL DEFAULT '',
    payment_method_id text COLLATE "C" NOT NULL DEFAULT '',
    card_brand        text NOT NULL DEFAULT '',
    card_last4        text NOT NULL DEFAULT '',
    threshold         bigint NOT NULL DEFAULT 0,
    package           text NOT NULL DEFAULT '',
    monthly_cap       integer NOT NULL DEFAULT 0,
    enabled           boolean NOT NULL DEFAULT false,
    paused            boolean NOT NULL DEFAULT false,
    paused_why        text NOT NULL DEFAULT '',
    updated           bigint NOT NULL
);

CREATE TABLE topups (
    id             text COLLATE "C" PRIMARY KEY,
    account_id     text COLLATE "C" NOT NULL REFERENCES accounts (id),
    month          text NOT NULL,
    status         text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'needs_action')),
    package        text NOT NULL,
    payment_intent text COLLATE "C" NOT NULL DEFAULT '',
    detail         text NOT NULL DEFAULT '',
    created        bigint NOT NULL,
    updated        bigint NOT NULL
);
CREATE INDEX topups_account ON topups (account_id, created);
CREATE INDEX topups_created ON topups (created);
CREATE UNIQUE INDEX topups_one_pending ON topups (account_id) WHERE status = 'pending';

-- +goose Down
DROP TABLE topups;
DROP TABLE topup_rules;
