package pipeline

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

// RetryFirst and RetryMax bound the pause between two attempts of a write the ledger could not
// take (RetryLater's).
const (
	RetryFirst = 250 * time.Millisecond
	RetryMax   = 5 * time.Second
)

// RetryLater runs op again in the background while the ledger is unavailable (ErrUnavailable),
// pausing from RetryFirst up to RetryMax, until op is done (nil), fails otherwise, or deadline
// has passed (expired says why that ends it); what names op in the log.
func RetryLater(log *zap.Logger, what string, deadline time.Time, expired string, op func(context.Context) error) {
	go func() {
		pause := RetryFirst
		for time.Now().Before(deadline) {
			time.Sleep(pause)
			pause = min(2*pause, RetryMax)
			err := op(context.Background())
			switch {
			case err == nil:
				return
			case errors.Is(err, ledger.ErrUnavailable):
				continue
			default:
				log.Error("giving up the delayed "+what, zap.Error(err))
				return
			}
		}
		log.Error("giving up the delayed " + what + ": " + expired)
	}()
}
