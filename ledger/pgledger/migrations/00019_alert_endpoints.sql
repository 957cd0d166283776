-- Alerts to the account's own HTTPS endpoints (ledger/alerts.go): the endpoints, each with its
-- signing secret sealed by the caller, and the outbox of their deliveries, kept for a while after
-- they end so that the account holder sees what was sent. A delivery's id is derived from its
-- endpoint and event, so an event enqueued twice is delivered once.

-- +goose Up
CREATE TABLE alert_endpoints (
    id            text COLLATE "C" PRIMARY KEY,
    account_id    text COLLATE "C" NOT NULL REFERENCES accounts (id),
    url           text NOT NULL,
    kinds         text[] NOT NULL DEFAULT '{}',
    sealed_secret bytea NOT NULL,
    created       bigint NOT NULL
);
CREATE INDEX alert_endpoints_account ON alert_endpoints (account_id, id);

CREATE TABLE alert_deliveries (
    id           text COLLATE "C" PRIMARY KEY,
    account_id   text COLLATE "C" NOT NULL,
    endpoint_id  text COLLATE "C" NOT NULL REFERENCES alert_endpoints (id) ON DELETE CASCADE,
    event_id     text NOT NULL,
    kind         text NOT NULL,
    payload      bytea NOT NULL,
    created      bigint NOT NULL,
    state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts     integer NOT NULL DEFAULT 0,
    next_attempt bigint NOT NULL,
    lease_until  bigint NOT NULL DEFAULT 0,
    claim        text NOT NULL DEFAULT '',
    last_status  integer NOT NULL DEFAULT 0,
    last_error   text NOT NULL DEFAULT '',
    finished     bigint NOT NULL DEFAULT 0
);
-- The senders' worklist: pending deliveries only.
CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt) WHERE state = 'pending';
CREATE INDEX alert_deliveries_account ON alert_deliveries (account_id, created);
CREATE INDEX alert_deliveries_endpoint ON alert_deliveries (endpoint_id);

-- What the periodic checks raised once (a key's budget crossed in a period, a member's cap in a
-- month): one row per occurrence, until it can no longer repeat (0: for good).
CREATE TABLE alert_notes (
    account_id text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    until      bigint NOT NULL,
    PRIMARY KEY (account_id, key)
);

-- +goose Down
DROP TABLE alert_notes;
DROP TABLE alert_deliveries;
DROP TABLE alert_endpoints;
