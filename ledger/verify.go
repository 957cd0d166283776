package ledger

// Verify's arithmetic, for every engine: what an account's entries add up to. Each engine reads
// its entries its own way and compares the sums with what it keeps.

// ModeSums are an account's figures for one mode as recomputed from its entries: the balance,
// the open holds, and the credits that refunds and disputes took and did not give back.
type ModeSums struct{ Bal, Open, Reversed int64 }

// Apply adds one entry: its amount to the balance; a hold opens its credits, a settle or void
// closes them (a settle after the sweep's void, reason SettledLateReason, closes none: the void
// did); a refund or dispute moves the reversed credits the other way.
func (m *ModeSums) Apply(e Entry) {
	m.Bal += e.Amount
	switch e.Kind {
	case KindHold:
		m.Open += e.HoldCredits()
	case KindSettle:
		if e.Reason != SettledLateReason {
			m.Open -= e.HoldCredits()
		}
	case KindVoid:
		m.Open -= e.HoldCredits()
	case KindRefund, KindDispute:
		m.Reversed -= e.Amount
	}
}

// Negative reports a balance or available figure below what the entries allow: zero, or, for
// an account that refunds or disputes took credits back from, minus those credits (a debt).
func (m *ModeSums) Negative() (balance, available bool) {
	return m.Bal < -m.Reversed, m.Bal-m.Open < -m.Reversed
}
