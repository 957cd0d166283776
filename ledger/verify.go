package ledger

// Verify's arithmetic, for every engine: what an account's entries add up to. Each engine reads
// its entries its own way and compares the sums with what it keeps.

// modeSums are an account's figures for one mode as recomputed from its entries.
type modeSums struct{ bal, open int64 }

// apply adds one entry: its amount to the balance; a hold opens one, a settle or void closes one.
func (m *modeSums) apply(kind EntryKind, amount int64) {
	m.bal += amount
	switch kind {
	case KindHold:
		m.open++
	case KindSettle, KindVoid:
		m.open--
	}
}
