-- The ledger on PostgreSQL (ledger/postgres_*.go). Applied by goose at OpenPostgres, under an
-- advisory lock; never edit a migration that has shipped: add the next one.
--
-- Times are unix nanoseconds in bigint columns: the ledger returns exactly the times it was
-- given (Go's time has nanoseconds, timestamptz microseconds). Money and counts are bigint.
-- Ids, references and keys are COLLATE "C", so that the database orders and compares them
-- byte by byte, as Go does, whatever the cluster's locale (ListAccounts pages by id).

-- +goose Up
CREATE TABLE accounts (
    id           text COLLATE "C" PRIMARY KEY,
    email        text COLLATE "C" NOT NULL UNIQUE,
    status       text NOT NULL CHECK (status IN ('active', 'disabled')),
    created      bigint NOT NULL,
    -- The figures that Verify recomputes from the entries: balances, open holds, and the
    -- number of the account's next entry.
    balance      bigint NOT NULL DEFAULT 0,
    held         bigint NOT NULL DEFAULT 0,
    test_balance bigint NOT NULL DEFAULT 0,
    test_held    bigint NOT NULL DEFAULT 0,
    next_seq     bigint NOT NULL DEFAULT 1,
    CONSTRAINT accounts_available_not_negative
        CHECK (held >= 0 AND test_held >= 0 AND balance >= held AND test_balance >= test_held)
);

-- One immutable line per change of an account's credits, numbered 1, 2, 3... per account.
CREATE TABLE entries (
    account_id      text COLLATE "C" NOT NULL REFERENCES accounts (id),
    seq             bigint NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('purchase', 'grant', 'hold', 'settle', 'void', 'adjustment')),
    mode            text NOT NULL CHECK (mode IN ('live', 'test')),
    amount          bigint NOT NULL,
    balance_after   bigint NOT NULL,
    available_after bigint NOT NULL,
    request_id      text COLLATE "C" NOT NULL DEFAULT '',
    key_id          text NOT NULL DEFAULT '',
    tool            text NOT NULL DEFAULT '',
    reference       text COLLATE "C" NOT NULL DEFAULT '',
    reason          text NOT NULL DEFAULT '',
    amount_cents    bigint NOT NULL DEFAULT 0,
    currency        text NOT NULL DEFAULT '',
    at              bigint NOT NULL,
    PRIMARY KEY (account_id, seq)
);
-- A grant reference (a Stripe session id...) credits an account once, whichever instance
-- receives it and however often.
CREATE UNIQUE INDEX entries_reference ON entries (account_id, reference) WHERE reference <> '';

-- Every hold ever taken; state moves from open to settled or voided exactly once.
CREATE TABLE holds (
    account_id  text COLLATE "C" NOT NULL REFERENCES accounts (id),
    request_id  text COLLATE "C" NOT NULL,
    mode        text NOT NULL CHECK (mode IN ('live', 'test')),
    state       text NOT NULL CHECK (state IN ('open', 'settled', 'voided')),
    key_id      text NOT NULL DEFAULT '',
    tool        text NOT NULL DEFAULT '',
    created     bigint NOT NULL,
    expires     bigint NOT NULL,
    hold_seq    bigint NOT NULL,
    resolved    bigint,
    resolve_seq bigint,
    reason      text NOT NULL DEFAULT '',
    PRIMARY KEY (account_id, request_id)
);
-- The expiry sweep's worklist.
CREATE INDEX holds_open_expires ON holds (expires) WHERE state = 'open';

-- API keys: the SHA-256 digest of the key, never the key.
CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    digest     bytea NOT NULL UNIQUE,
    mode       text NOT NULL CHECK (mode IN ('live', 'test')),
    name       text NOT NULL,
    prefix     text NOT NULL,
    last4      text NOT NULL,
    created    bigint NOT NULL,
    last_used  bigint,
    expires    bigint,
    revoked    bigint
);
CREATE INDEX api_keys_account ON api_keys (account_id, created, id);

-- Passwords: argon2id hashes in PHC form (password.go).
CREATE TABLE credentials (
    account_id text COLLATE "C" PRIMARY KEY REFERENCES accounts (id),
    hash       text NOT NULL,
    updated    bigint NOT NULL
);

-- Browser sessions: the SHA-256 digest of the token, never the token.
CREATE TABLE sessions (
    digest     bytea PRIMARY KEY,
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    created    bigint NOT NULL,
    expires    bigint NOT NULL,
    csrf_token text NOT NULL
);
CREATE INDEX sessions_account ON sessions (account_id);
CREATE INDEX sessions_expires ON sessions (expires);

-- Idempotency-Key records (idempotency.go), kept 24 hours.
CREATE TABLE idempotency (
    account_id  text COLLATE "C" NOT NULL REFERENCES accounts (id),
    idem_key    text COLLATE "C" NOT NULL,
    request_id  text NOT NULL,
    fingerprint text NOT NULL,
    status      integer NOT NULL,
    created     bigint NOT NULL,
    hold_ttl    bigint NOT NULL,
    PRIMARY KEY (account_id, idem_key)
);
CREATE INDEX idempotency_created ON idempotency (created);

-- The functions below are every change of credits. Each one starts by locking its account's
-- row (FOR NO KEY UPDATE: key lookups by foreign keys still pass), which orders all changes of
-- one account across every instance; under READ COMMITTED each statement after the lock sees
-- what the transactions before it committed, so "was this request id held", "was this
-- reference used" and "is a credit available" are decided on current data. They report
-- expected outcomes (not_found, insufficient, repeated...) as values instead of raising, so
-- that many of them run in one transaction of the group committer and one caller's refusal
-- does not undo the others'.

-- ledger_available is the available credit of mode on account row a.
-- +goose StatementBegin
CREATE FUNCTION ledger_available(a accounts, p_mode text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_mode = 'live' THEN a.balance - a.held ELSE a.test_balance - a.test_held END
$$;
-- +goose StatementEnd

-- ledger_append records one change of the account's credits: amount to the balance and dheld
-- to the open holds of mode, the next entry number, and the figures after it. Every change goes
-- through here, so the "after" figures are computed one way. The caller holds the row lock.
-- +goose StatementBegin
CREATE FUNCTION ledger_append(p_account text, p_kind text, p_mode text, p_amount bigint, p_dheld bigint,
    p_request text, p_key text, p_tool text, p_reference text, p_reason text, p_cents bigint,
    p_currency text, p_at bigint) RETURNS entries
LANGUAGE plpgsql AS $$
DECLARE
    e entries;
BEGIN
    UPDATE accounts SET
        balance      = balance      + CASE WHEN p_mode = 'live' THEN p_amount ELSE 0 END,
        held         = held         + CASE WHEN p_mode = 'live' THEN p_dheld  ELSE 0 END,
        test_balance = test_balance + CASE WHEN p_mode = 'test' THEN p_amount ELSE 0 END,
        test_held    = test_held    + CASE WHEN p_mode = 'test' THEN p_dheld  ELSE 0 END,
        next_seq     = next_seq + 1
    WHERE id = p_account
    RETURNING next_seq - 1,
        CASE WHEN p_mode = 'live' THEN balance ELSE test_balance END,
        CASE WHEN p_mode = 'live' THEN balance - held ELSE test_balance - test_held END
    INTO e.seq, e.balance_after, e.available_after;
    e.account_id := p_account;
    e.kind := p_kind;
    e.mode := p_mode;
    e.amount := p_amount;
    e.request_id := p_request;
    e.key_id := p_key;
    e.tool := p_tool;
    e.reference := p_reference;
    e.reason := p_reason;
    e.amount_cents := p_cents;
    e.currency := p_currency;
    e.at := p_at;
    INSERT INTO entries SELECT e.*;
    RETURN e;
END
$$;
-- +goose StatementEnd

-- ledger_hold reserves one credit of mode for request p_request. A request id already held
-- reports that hold's state (repeated); otherwise a disabled account or no available credit
-- refuses it and nothing is written.
-- +goose StatementBegin
CREATE FUNCTION ledger_hold(p_account text, p_request text, p_mode text, p_key text, p_tool text,
    p_at bigint, p_expires bigint, OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    e entries;
BEGIN
    SELECT * INTO a FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    SELECT * INTO h FROM holds WHERE account_id = p_account AND request_id = p_request;
    IF FOUND THEN
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        RETURN;
    END IF;
    IF a.status <> 'active' THEN
        o_outcome := 'disabled';
        RETURN;
    END IF;
    IF ledger_available(a, p_mode) < 1 THEN
        o_outcome := 'insufficient';
        RETURN;
    END IF;
    e := ledger_append(p_account, 'hold', p_mode, 0, 1, p_request, p_key, p_tool, '', '', 0, '', p_at);
    INSERT INTO holds (account_id, request_id, mode, state, key_id, tool, created, expires, hold_seq)
    VALUES (p_account, p_request, p_mode, 'open', p_key, p_tool, p_at, p_expires, e.seq);
    o_outcome := 'ok';
    o_state := 'open';
    o_available := e.available_after;
END
$$;
-- +goose StatementEnd

-- ledger_resolve settles (p_to 'settled': balance -1) or voids (p_to 'voided') an open hold.
-- Only an open hold changes (UPDATE ... WHERE state = 'open'), so a second resolver, another
-- instance or the expiry sweep, changes nothing and reports the first outcome (repeated).
-- p_expired_only is the sweep's: it voids the hold only if it is still open and expired.
-- +goose StatementBegin
CREATE FUNCTION ledger_resolve(p_account text, p_request text, p_to text, p_reason text, p_at bigint,
    p_expired_only boolean, OUT o_outcome text, OUT o_state text, OUT o_available bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
    e entries;
BEGIN
    SELECT * INTO a FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    UPDATE holds SET state = p_to, resolved = p_at, resolve_seq = a.next_seq,
        reason = CASE WHEN p_to = 'voided' THEN p_reason ELSE '' END
    WHERE account_id = p_account AND request_id = p_request AND state = 'open'
        AND (NOT p_expired_only OR expires <= p_at)
    RETURNING * INTO h;
    IF NOT FOUND THEN
        SELECT * INTO h FROM holds WHERE account_id = p_account AND request_id = p_request;
        IF NOT FOUND THEN
            o_outcome := 'no_hold';
            RETURN;
        END IF;
        o_outcome := 'repeated';
        o_state := h.state;
        o_available := ledger_available(a, h.mode);
        RETURN;
    END IF;
    e := ledger_append(p_account, CASE WHEN p_to = 'settled' THEN 'settle' ELSE 'void' END, h.mode,
        CASE WHEN p_to = 'settled' THEN -1 ELSE 0 END, -1, p_request, h.key_id, h.tool, '', h.reason,
        0, '', p_at);
    o_outcome := 'ok';
    o_state := p_to;
    o_available := e.available_after;
END
$$;
-- +goose StatementEnd

-- ledger_grant adds credits (grant, purchase) or adds or removes them (adjustment). A reference
-- already used on the account credits nothing and returns the first entry (repeated); the
-- unique index entries_reference backs this up.
-- +goose StatementBegin
CREATE FUNCTION ledger_grant(p_account text, p_mode text, p_kind text, p_credits bigint, p_reference text,
    p_reason text, p_cents bigint, p_currency text, p_at bigint,
    OUT o_outcome text, OUT o_entry entries, OUT o_account accounts)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO o_account FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF NOT FOUND THEN
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
    o_entry := ledger_append(p_account, p_kind, p_mode, p_credits, 0, '', '', '', p_reference, p_reason,
        p_cents, p_currency, p_at);
    SELECT * INTO o_account FROM accounts WHERE id = p_account;
    o_outcome := 'ok';
END
$$;
-- +goose StatementEnd

-- ledger_refill tops the account's available test credits up to p_upto with a grant.
-- +goose StatementBegin
CREATE FUNCTION ledger_refill(p_account text, p_upto bigint, p_at bigint,
    OUT o_outcome text, OUT o_credits bigint, OUT o_account accounts)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO o_account FROM accounts WHERE id = p_account FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    IF o_account.status <> 'active' THEN
        o_outcome := 'disabled';
        RETURN;
    END IF;
    o_outcome := 'ok';
    o_credits := greatest(p_upto - ledger_available(o_account, 'test'), 0);
    IF o_credits > 0 THEN
        PERFORM ledger_append(p_account, 'grant', 'test', o_credits, 0, '', '', '', '', 'test credit refill',
            0, '', p_at);
        SELECT * INTO o_account FROM accounts WHERE id = p_account;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ledger_refill, ledger_grant, ledger_resolve, ledger_hold, ledger_append, ledger_available;
DROP TABLE idempotency, sessions, credentials, api_keys, holds, entries, accounts;
