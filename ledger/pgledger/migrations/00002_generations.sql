-- Kept generations: the encrypted text of charged generations for their retention
-- window, so that any instance can serve or resume it. The ledger keeps only ciphertext (the
-- handler encrypts every chunk); the sweep deletes rows whose window has ended.

-- +goose Up
CREATE TABLE generations (
    account_id    text COLLATE "C" NOT NULL REFERENCES accounts (id),
    request_id    text COLLATE "C" NOT NULL,
    mode          text NOT NULL CHECK (mode IN ('live', 'test')),
    tool          text NOT NULL DEFAULT '',
    language      text NOT NULL DEFAULT '',
    state         text NOT NULL CHECK (state IN ('running', 'completed', 'interrupted')),
    created       bigint NOT NULL,
    finished      bigint,
    expires       bigint NOT NULL,
    output_tokens bigint NOT NULL DEFAULT 0,
    pieces        bigint NOT NULL DEFAULT 0,
    bytes         bigint NOT NULL DEFAULT 0,
    chunks        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, request_id)
);
-- The sweep's worklist.
CREATE INDEX generations_expires ON generations (expires);

CREATE TABLE generation_chunks (
    account_id text COLLATE "C" NOT NULL,
    request_id text COLLATE "C" NOT NULL,
    n          bigint NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (account_id, request_id, n),
    FOREIGN KEY (account_id, request_id) REFERENCES generations (account_id, request_id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE generation_chunks, generations;
