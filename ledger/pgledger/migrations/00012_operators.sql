-- The operators of the console, their sessions and the audit log. An operator's password is an
-- argon2id hash, its TOTP secret sealed by the console, its recovery codes SHA-256 digests.
-- The audit log is append-only: a trigger refuses every UPDATE and DELETE of it.

-- +goose Up
CREATE TABLE operators (
    id               text COLLATE "C" PRIMARY KEY,
    email            text NOT NULL UNIQUE,
    role             text NOT NULL,
    created          bigint NOT NULL,
    hash             text NOT NULL,
    totp_sealed      bytea NOT NULL,
    totp_last_step   bigint NOT NULL DEFAULT 0,
    recovery         bytea[] NOT NULL
);

CREATE TABLE operator_sessions (
    digest      bytea PRIMARY KEY,
    operator_id text COLLATE "C" NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    created     bigint NOT NULL,
    expires     bigint NOT NULL,
    last_seen   bigint NOT NULL,
    csrf_token  text NOT NULL
);

CREATE TABLE operator_audit (
    id             text COLLATE "C" PRIMARY KEY,
    at             bigint NOT NULL,
    operator_id    text NOT NULL,
    operator_email text NOT NULL,
    action         text NOT NULL,
    account_id     text COLLATE "C" NOT NULL DEFAULT '',
    detail         text NOT NULL DEFAULT '',
    note           text NOT NULL
);
CREATE INDEX operator_audit_newest ON operator_audit (at DESC, id DESC);
CREATE INDEX operator_audit_account ON operator_audit (account_id, at DESC, id DESC);

-- +goose StatementBegin
CREATE FUNCTION operator_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER operator_audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON operator_audit
    FOR EACH STATEMENT EXECUTE FUNCTION operator_audit_append_only();

-- +goose Down
DROP TABLE operator_audit;
DROP FUNCTION operator_audit_append_only();
DROP TABLE operator_sessions;
DROP TABLE operators;
