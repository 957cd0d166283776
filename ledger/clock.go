package ledger

import "time"

// now is the ledger's clock, for every engine: hold and session expiry, entry times and the
// 24 h of an Idempotency-Key are all read from it. Tests replace it instead of sleeping.
var now = time.Now
