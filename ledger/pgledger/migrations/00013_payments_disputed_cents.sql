-- A purchase keeps what it paid for less what came back, whatever the order of its refunds and
-- disputes (reversals.go: takenBy): the credits they take follow from the money they took back
-- or hold, so a payment keeps the cents of its disputes open or lost next to its refunded cents.
-- Payments disputed before are counted from their disputes.

-- +goose Up
ALTER TABLE payments ADD COLUMN disputed_cents bigint NOT NULL DEFAULT 0;
UPDATE payments p SET disputed_cents = d.cents
    FROM (SELECT payment, sum(amount_cents) AS cents FROM reversals
        WHERE kind = 'dispute' AND status IN ('open', 'lost') GROUP BY payment) d
    WHERE p.id = d.payment;

-- +goose Down
ALTER TABLE payments DROP COLUMN disputed_cents;
