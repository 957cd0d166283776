-- Why a kept generation's answer ended: 'stop' (the model finished it), 'length' (it reached the
-- tool's max_output_tokens), '' while it runs or when it was interrupted, and for generations kept
-- before this column.

-- +goose Up
ALTER TABLE generations ADD COLUMN finish_reason text NOT NULL DEFAULT ''
    CHECK (finish_reason IN ('', 'stop', 'length'));

-- +goose Down
ALTER TABLE generations DROP COLUMN finish_reason;
