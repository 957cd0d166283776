-- E-mail: the outbox the senders drain, single-use tokens (verify an address, reset a password,
-- accept an invitation) kept only as their SHA-256 digest, and the account's address state and
-- low-balance alert. Accounts that exist already count as verified.

-- +goose Up
ALTER TABLE accounts
    ADD COLUMN unverified           boolean NOT NULL DEFAULT false,
    ADD COLUMN low_balance_alert    bigint  NOT NULL DEFAULT 0,
    ADD COLUMN low_balance_notified boolean NOT NULL DEFAULT false;

CREATE TABLE account_tokens (
    digest     bytea PRIMARY KEY,
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    purpose    text NOT NULL,
    expires    bigint NOT NULL
);
CREATE INDEX account_tokens_expires ON account_tokens (expires);

CREATE TABLE mail_outbox (
    id           text COLLATE "C" PRIMARY KEY,
    account_id   text COLLATE "C" NOT NULL DEFAULT '',
    kind         text NOT NULL DEFAULT '',
    sealed       bytea NOT NULL,
    created      bigint NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    next_attempt bigint NOT NULL,
    lease_until  bigint NOT NULL DEFAULT 0,
    claim        text NOT NULL DEFAULT '',
    last_error   text NOT NULL DEFAULT ''
);
CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt);

-- +goose Down
DROP TABLE mail_outbox;
DROP TABLE account_tokens;
ALTER TABLE accounts
    DROP COLUMN unverified,
    DROP COLUMN low_balance_alert,
    DROP COLUMN low_balance_notified;
