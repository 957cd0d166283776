-- Redemption codes (ledger/codes.go): a code is stored only as the SHA-256 digest of its
-- normalised text. uses counts its redemptions and can never pass max_uses (a CHECK, beside
-- the row lock Redeem takes); code_redemptions has one row per code and account (its primary
-- key), written in the transaction that writes the account's grant entry.

-- +goose Up
CREATE TABLE redemption_codes (
    id       text COLLATE "C" PRIMARY KEY,
    digest   bytea NOT NULL UNIQUE,
    last4    text NOT NULL,
    credits  bigint NOT NULL CHECK (credits > 0),
    max_uses bigint NOT NULL CHECK (max_uses > 0),
    uses     bigint NOT NULL DEFAULT 0,
    expires  bigint,
    note     text NOT NULL DEFAULT '',
    created  bigint NOT NULL,
    disabled bigint,
    CONSTRAINT redemption_codes_uses_within_max CHECK (uses >= 0 AND uses <= max_uses)
);
CREATE INDEX redemption_codes_newest ON redemption_codes (created DESC, id);

CREATE TABLE code_redemptions (
    code_id    text COLLATE "C" NOT NULL REFERENCES redemption_codes (id),
    account_id text COLLATE "C" NOT NULL REFERENCES accounts (id),
    credits    bigint NOT NULL,
    seq        bigint NOT NULL,
    at         bigint NOT NULL,
    PRIMARY KEY (code_id, account_id)
);
CREATE INDEX code_redemptions_newest ON code_redemptions (code_id, at DESC);

-- +goose Down
DROP TABLE code_redemptions;
DROP TABLE redemption_codes;
