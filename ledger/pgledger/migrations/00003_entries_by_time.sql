-- An account's entries by time, so that a usage summary of its last days (My Account's chart)
-- reads those days only, not the account's whole history.

-- +goose Up
CREATE INDEX entries_account_at ON entries (account_id, at);

-- +goose Down
DROP INDEX entries_account_at;
