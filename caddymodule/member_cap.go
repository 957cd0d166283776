package caddymodule

import (
	"net/http"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// memberCapReached is the 402 of a key whose member of an organisation has used up their
// monthly credit cap (ledger.ErrMemberCapReached): nothing was charged, and the answer says when
// the cap's UTC month ends (also as Retry-After) and who can raise it.
func memberCapReached(t time.Time) *apiError {
	resets := ledger.MemberCapResets(t)
	e := newError(http.StatusPaymentRequired, "member_cap_reached", "",
		"your monthly credit cap in this organisation is used up; it resets at "+resets.Format(time.RFC3339)+
			" (the start of the next UTC month), or an owner of the organisation can raise it in My Account")
	e.RetryAfter = resets.Sub(t)
	return e
}
