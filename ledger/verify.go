package ledger

// Verify's arithmetic, for every engine: what an account's entries add up to. Each engine reads
// its entries its own way and compares the sums with what it keeps.

// modeSums are an account's figures for one mode as recomputed from its entries: the balance,
// the open holds, and the credits that refunds and disputes took and did not give back.
type modeSums struct{ bal, open, reversed int64 }

// apply adds one entry: its amount to the balance; a hold opens one, a settle or void closes one
// (a settle after the sweep's void, reason SettledLateReason, closes none: the void did); a
// refund or dispute moves the reversed credits the other way.
func (m *modeSums) apply(kind EntryKind, amount int64, reason string) {
	m.bal += amount
	switch kind {
	case KindHold:
		m.open++
	case KindSettle:
		if reason != SettledLateReason {
			m.open--
		}
	case KindVoid:
		m.open--
	case KindRefund, KindDispute:
		m.reversed -= amount
	}
}

// negative reports a balance or available figure below what the entries allow: zero, or, for
// an account that refunds or disputes took credits back from, minus those credits (a debt).
func (m *modeSums) negative() (balance, available bool) {
	return m.bal < -m.reversed, m.bal-m.open < -m.reversed
}
