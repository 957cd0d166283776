package badgerledger

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/caddy-textgen/textgen/ledger"
)

// The generator of large ledgers for BenchmarkLargeLedger (scale_test.go): it writes a
// Badger directory as the engine would have written it after years of use, with the engine's own
// record encoders and key layout, through Badger's bulk path (StreamWriter: sorted tables written
// straight to the tree, one stream a record type), so that 50 million entries take minutes, not
// the days of 50 million synced commits. Every account has one purchase and then generations
// (a hold entry and a settle, one in 25 voided instead) with their hold records; every account
// has a live key and a test key (one test key in ten revoked). The result passes Verify.

// genSpec sizes a generated ledger.
type genSpec struct {
	Accounts   int           // accounts
	Keys       int           // keys, spread evenly over the accounts (at least one each)
	Entries    int           // entries in all, about (each account's count is odd: a purchase and pairs)
	Big        int           // accounts that hold BigEntries entries each
	BigEntries int           // entries of each big account
	Now        time.Time     // the newest entry's time, about
	Span       time.Duration // how far back the history goes
	Seed       uint64        // the same seed gives the same ledger (ids and keys aside)
}

// genScale is the ledger of an operator of that size: 1,000,000 accounts, 2,000,000 keys,
// 50,000,000 entries, 50 accounts of 100,000 entries each, over a year; f scales the counts
// (never the big accounts' length, which is what one customer's history costs).
func genScale(f float64, t time.Time) genSpec {
	n := func(x float64) int { return max(1, int(x*f)) }
	return genSpec{
		Accounts: n(1_000_000), Keys: n(2_000_000), Entries: n(50_000_000),
		Big: n(50), BigEntries: 100_000,
		Now: t, Span: 365 * 24 * time.Hour, Seed: 1,
	}
}

// genTools are the tools the generated generations use.
var genTools = []string{"summarize", "rewrite", "translate", "proofread", "bullet-points", "email-reply", "headline", "tweet"}

// genResult is what genLedger wrote.
type genResult struct {
	Accounts, Keys, Entries, Holds int
	BigAccounts                    []string // the accounts with BigEntries entries
	Small                          string   // an account of the usual length
	Took                           time.Duration
}

// genAcct is one account to generate: everything that must agree between the passes over
// record types is derived from its index.
type genAcct struct {
	id    string
	gens  int // generations: the account has 1+2*gens entries
	keyID []string
	dig   [][32]byte
}

// genLedger fills the empty directory dir with the ledger spec describes.
func genLedger(dir string, spec genSpec) (genResult, error) {
	start := time.Now()
	var res genResult
	opts, _ := Options{DisableSyncWrites: true}.withDefaults()
	db, err := badger.Open(badgerOptions(dir, opts))
	if err != nil {
		return res, err
	}
	defer db.Close()

	rng := rand.New(rand.NewPCG(spec.Seed, 0))
	accts := make([]genAcct, spec.Accounts)
	seen := map[string]bool{}
	for i := range accts {
		id := ledger.NewAccountID()
		for seen[id] {
			id = ledger.NewAccountID()
		}
		seen[id] = true
		accts[i].id = id
	}
	seen = nil
	slices.SortFunc(accts, func(a, b genAcct) int { return cmp.Compare(a.id, b.id) })
	// Which accounts are big: spread over the id space.
	big := map[int]bool{}
	for len(big) < min(spec.Big, spec.Accounts) {
		big[rng.IntN(spec.Accounts)] = true
	}
	rest := spec.Entries - len(big)*spec.BigEntries
	per := max(1, rest/max(1, spec.Accounts-len(big)))
	keysPer := max(1, spec.Keys/spec.Accounts)
	for i := range accts {
		a := &accts[i]
		e := per
		if big[i] {
			e = spec.BigEntries
			res.BigAccounts = append(res.BigAccounts, a.id)
		} else if res.Small == "" {
			res.Small = a.id
		}
		a.gens = max(0, (e-1)/2)
		for k := range keysPer {
			a.keyID = append(a.keyID, ledger.NewKeyID())
			mode := ledger.Live
			if k%2 == 1 {
				mode = ledger.Test
			}
			a.dig = append(a.dig, sha256.Sum256([]byte(ledger.NewFullKey(mode))))
		}
		slices.Sort(a.keyID)
	}

	sw := db.NewStreamWriter()
	if err := sw.Prepare(); err != nil {
		return res, err
	}
	buf := z.NewBuffer(8<<20, "ledgergen")
	put := func(k, v []byte) error {
		// One stream a record type: their key ranges never overlap, and each comes in order.
		badger.KVToBuffer(&pb.KV{Key: k, Value: v, Version: 1, StreamId: uint32(k[0])}, buf)
		if buf.LenNoPadding() < 4<<20 {
			return nil
		}
		if err := sw.Write(buf); err != nil {
			return err
		}
		buf.Release()
		buf = z.NewBuffer(8<<20, "ledgergen")
		return nil
	}
	defer func() { buf.Release() }()

	created := spec.Now.Add(-spec.Span).UTC()
	acctRec := func(i int) ledger.Account {
		return ledger.Account{ID: accts[i].id, Email: fmt.Sprintf("user%08d@example.com", i), Status: ledger.StatusActive, Created: created}
	}
	// 0x01 accounts, 0x02 e-mail addresses (the zero-padded index keeps them in id order).
	for i := range accts {
		if err := put(accountKey(accts[i].id), mustJSON(acctRec(i))); err != nil {
			return res, err
		}
	}
	for i := range accts {
		if err := put(emailKey(acctRec(i).Email), []byte(accts[i].id)); err != nil {
			return res, err
		}
	}
	// 0x03 key digests, in digest order.
	type hashRow struct {
		d    [32]byte
		a, k int
	}
	rows := make([]hashRow, 0, len(accts)*keysPer)
	for i := range accts {
		for k, d := range accts[i].dig {
			rows = append(rows, hashRow{d, i, k})
		}
	}
	slices.SortFunc(rows, func(x, y hashRow) int { return slices.Compare(x.d[:], y.d[:]) })
	for _, r := range rows {
		a := &accts[r.a]
		if err := put(keyHashKey(r.d), append([]byte(a.id), a.keyID[r.k]...)); err != nil {
			return res, err
		}
	}
	rows = nil
	// 0x04 key records.
	for i := range accts {
		a := &accts[i]
		for k, kid := range a.keyID {
			mode, prefix := ledger.Live, ledger.LivePrefix
			if k%2 == 1 {
				mode, prefix = ledger.Test, ledger.TestPrefix
			}
			key := ledger.Key{ID: kid, AccountID: a.id, Mode: mode, Name: fmt.Sprintf("key %d", k+1), Prefix: prefix,
				Last4: "abcd", Created: created}
			if k%2 == 1 && i%10 == 3 {
				key.Revoked = created.Add(time.Hour)
			}
			if err := put(keyRecordKey(a.id, kid), mustJSON(keyRecord{Key: key, Digest: hex.EncodeToString(a.dig[k][:])})); err != nil {
				return res, err
			}
			res.Keys++
		}
	}
	// 0x05 balances, 0x06 hold records, 0x08 entries, 0x09 purchase references: all derived
	// from the account's history (genHistory).
	for i := range accts {
		h := genHistory(&accts[i], i, spec)
		if err := put(balanceKey(accts[i].id), balanceRecordJSON(&h.bal)); err != nil {
			return res, err
		}
	}
	for i := range accts {
		h := genHistory(&accts[i], i, spec)
		for j := range h.holds {
			if err := put(holdKey(accts[i].id, h.holds[j].RequestID), holdRecordJSON(&h.holds[j])); err != nil {
				return res, err
			}
		}
		res.Holds += len(h.holds)
	}
	for i := range accts {
		h := genHistory(&accts[i], i, spec)
		for j := range h.entries {
			if err := put(entryKey(accts[i].id, h.entries[j].Seq), entryJSON(&h.entries[j])); err != nil {
				return res, err
			}
		}
		res.Entries += len(h.entries)
	}
	for i := range accts {
		if err := put(grantRefKey(accts[i].id, genReference(i)), seqBytes(1)); err != nil {
			return res, err
		}
	}
	if err := put(metaSchemaKey, []byte(schemaVersion)); err != nil {
		return res, err
	}
	if err := sw.Write(buf); err != nil {
		return res, err
	}
	if err := sw.Flush(); err != nil {
		return res, err
	}
	res.Accounts = len(accts)
	res.Took = time.Since(start)
	return res, db.Close()
}

func genReference(i int) string { return fmt.Sprintf("cs_gen_%08d", i) }

// genHist is one account's generated records.
type genHist struct {
	bal     balanceRecord
	entries []ledger.Entry
	holds   []holdRecord
}

// genHistory derives account i's history: a purchase of enough credits, then its generations,
// evenly over the span, each a hold and a settle (one in 25 a void), with their hold records.
func genHistory(a *genAcct, i int, spec genSpec) genHist {
	rng := rand.New(rand.NewPCG(spec.Seed, uint64(i)+1))
	first := spec.Now.Add(-spec.Span).Add(time.Duration(rng.Int64N(int64(spec.Span / 2)))).UTC()
	step := spec.Now.Sub(first) / time.Duration(a.gens+1)
	credits := int64(a.gens + 10)
	h := genHist{entries: make([]ledger.Entry, 0, 1+2*a.gens), holds: make([]holdRecord, 0, a.gens)}
	bal := credits
	h.entries = append(h.entries, ledger.Entry{Seq: 1, AccountID: a.id, Kind: ledger.KindPurchase, Mode: ledger.Live, Amount: credits,
		BalanceAfter: bal, AvailableAfter: bal, Reference: genReference(i), AmountCents: credits * 20, Currency: "EUR", Time: first})
	seq := uint64(2)
	var rid [26]byte
	copy(rid[:], "req_")
	for j := range a.gens {
		t := first.Add(time.Duration(j+1) * step)
		// The request id's first 10 characters count the generations, so that the account's
		// hold records come in key order; the rest is random, as the handler's are.
		n := j
		for p := 13; p >= 4; p-- {
			rid[p] = ledger.Base62[n%62]
			n /= 62
		}
		for p := 14; p < len(rid); p++ {
			rid[p] = ledger.Base62[rng.IntN(62)]
		}
		tool := genTools[rng.IntN(len(genTools))]
		kid := a.keyID[0]
		void := j%25 == 7
		hold := ledger.Entry{Seq: seq, AccountID: a.id, Kind: ledger.KindHold, Mode: ledger.Live, BalanceAfter: bal, AvailableAfter: bal - 1,
			RequestID: string(rid[:]), KeyID: kid, Tool: tool, Time: t}
		res := ledger.Entry{Seq: seq + 1, AccountID: a.id, Kind: ledger.KindSettle, Mode: ledger.Live, Amount: -1, RequestID: hold.RequestID,
			KeyID: kid, Tool: tool, Time: t.Add(min(step/2, 3*time.Second))}
		rec := holdRecord{AccountID: a.id, RequestID: hold.RequestID, Mode: ledger.Live, State: ledger.HoldSettled, KeyID: kid, Tool: tool,
			Created: t, Expires: t.Add(ledger.DefaultHoldTTL), HoldSeq: seq, Resolved: res.Time, ResolveSeq: seq + 1}
		if void {
			res.Kind, res.Amount, res.Reason = ledger.KindVoid, 0, "backend_error"
			rec.State, rec.Reason = ledger.HoldVoided, "backend_error"
		} else {
			bal--
		}
		res.BalanceAfter, res.AvailableAfter = bal, bal
		h.entries = append(h.entries, hold, res)
		h.holds = append(h.holds, rec)
		seq += 2
	}
	h.bal = balanceRecord{Balance: bal, NextSeq: seq}
	return h
}
