package account

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// Invite makes the invitation link of an account (7 days, single-use; reset.go serves it) and
// e-mails it when e-mail is on. The admin API calls it (caddy textgen account invite).
func (a *app) Invite(ctx context.Context, accountID string) (string, bool, error) {
	acct, err := a.store.GetAccount(ctx, accountID)
	if err != nil {
		return "", false, err
	}
	if acct.Status != ledger.StatusActive {
		return "", false, fmt.Errorf("account %s is disabled: %w", acct.ID, ledger.ErrAccountDisabled)
	}
	if a.mail == nil {
		tok, err := a.store.CreateToken(ctx, acct.ID, ledger.TokenInvite, inviteTTL)
		if err != nil {
			return "", false, err
		}
		return a.mailLink("/invite", tok), false, nil
	}
	link, err := a.sendTokenMail(ctx, acct, ledger.TokenInvite, inviteTTL, "invite", "/invite")
	if err != nil {
		return "", false, err
	}
	a.logger.Info("invitation queued", zap.String("account", acct.ID))
	return link, true, nil
}

// Interface guards
var _ textgenapp.Inviter = (*app)(nil)
