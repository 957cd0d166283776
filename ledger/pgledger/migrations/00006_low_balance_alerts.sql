-- The low-balance check's worklist (LowBalanceChanges, postgres_tokens.go): the active accounts
-- with an alert, in id order, so that the check reads those rows only, not every account. The
-- crossing itself (balance - held against the alert) is left out of the index on purpose: an
-- index over balance or held would make every hold, settle and grant, which update those
-- columns, a non-HOT update that writes every index of accounts anew.

-- +goose Up
CREATE INDEX accounts_low_balance_alert ON accounts (id) WHERE low_balance_alert > 0 AND status = 'active';

-- +goose Down
DROP INDEX accounts_low_balance_alert;
