-- Signed receipts (receipts.go): the keys that sign them, every one ever used (a receipt signed
-- before a rotation still verifies with its key), the private half sealed by the handler, at
-- most one current (valid_until NULL); and the SHA-256 digest of each charged generation's text,
-- kept for good so that a receipt can be signed after the text's window. Rows are never deleted.

-- +goose Up
CREATE TABLE receipt_keys (
    id                 text COLLATE "C" PRIMARY KEY,
    public_key         bytea NOT NULL CHECK (length(public_key) = 32),
    sealed_private_key bytea NOT NULL,
    valid_from         bigint NOT NULL,
    valid_until        bigint
);
CREATE UNIQUE INDEX receipt_keys_one_current ON receipt_keys ((true)) WHERE valid_until IS NULL;

CREATE TABLE receipt_digests (
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    request_id text COLLATE "C" NOT NULL,
    sha256     bytea NOT NULL CHECK (length(sha256) = 32),
    PRIMARY KEY (account_id, request_id)
);

-- +goose Down
DROP TABLE receipt_digests;
DROP TABLE receipt_keys;
