package badgerledger

import (
	"encoding/binary"

	"github.com/caddy-textgen/textgen/ledger"
)

// One-byte type codes that start every Badger key. Ids that follow are fixed-width (account ids
// are 21 bytes, key ids 16: ledger/ids.go), numbers big-endian, so byte order is numeric order and one account's
// records are one contiguous prefix.
//
// Never reuse a retired code: an old backup or a half-migrated directory may still hold keys
// with it, and a new meaning would silently misread them. Add new codes at the end.
const (
	prefixAccount  byte = 0x01 // acct id -> Account (JSON)
	prefixEmail    byte = 0x02 // normalised email -> acct id
	prefixKeyHash  byte = 0x03 // SHA-256 digest (32 bytes) -> acct id + key id
	prefixKey      byte = 0x04 // acct id + key id -> keyRecord (JSON)
	prefixBalance  byte = 0x05 // acct id -> balanceRecord (JSON)
	prefixHold     byte = 0x06 // acct id + request id -> holdRecord (JSON), kept after resolution
	prefixOpenHold byte = 0x07 // acct id + request id -> empty; present only while the hold is open
	prefixEntry    byte = 0x08 // acct id + seq (uint64 BE) -> Entry (JSON)
	prefixGrantRef byte = 0x09 // acct id + reference -> seq (uint64 BE) of the first entry
	prefixIdem     byte = 0x0A // acct id + Idempotency-Key -> IdempotencyRecord (JSON), 24 h TTL
	prefixMeta     byte = 0x0B // name -> value (schema version)
	// The account area (credentials.go).
	prefixCredential  byte = 0x0C // acct id -> credentialRecord (JSON): argon2id hash of the password
	prefixSession     byte = 0x0D // SHA-256 digest of a session token (32 bytes) -> sessionRecord (JSON), Badger TTL = expiry
	prefixAcctSession byte = 0x0E // acct id + session digest -> empty, same TTL; finds an account's sessions
	// Kept generations (generations.go), Badger TTL = the end of their window.
	prefixGeneration byte = 0x0F // acct id + request id -> GenerationRecord (JSON), or it and its chunks (wholeValue)
	prefixGenChunk   byte = 0x10 // acct id + len(request id) (1 byte) + request id + n (uint32 BE) -> ciphertext
	// E-mail (outbox.go, tokens.go).
	prefixOutbox byte = 0x11 // mail id -> outboxRecord (JSON): a queued message, sealed by the caller
	prefixToken  byte = 0x12 // SHA-256 digest of a verify/reset/invite token (32 bytes) -> tokenRecord (JSON), Badger TTL = expiry
	// Payments that credited nothing (payments.go).
	prefixPayment byte = 0x13 // reference -> UnmatchedPayment (JSON), kept for good
	// Money that flows back (reversals.go), kept for good.
	prefixPaymentIntent byte = 0x14 // payment id -> Payment (JSON)
	prefixAcctPayment   byte = 0x15 // acct id + payment id -> empty: finds an account's payments
	prefixReversal      byte = 0x16 // refund or dispute id -> Reversal (JSON)
	prefixPaymentRef    byte = 0x17 // purchase reference -> payment id
	// Signed receipts (receipts.go), kept for good.
	prefixReceiptKey    byte = 0x20 // receipt key id -> ReceiptKey (JSON), its private half sealed by the caller
	prefixReceiptDigest byte = 0x21 // acct id + request id -> SHA-256 of the generation's text (32 bytes)
	// Organisations (members.go), kept for good.
	prefixMember      byte = 0x1C // org id + member id -> memberRecord (JSON)
	prefixMemberUsage byte = 0x1D // org id + member id + month (YYYY-MM) -> credits taken (decimal)
	prefixMemberOf    byte = 0x1E // member id + org id -> empty: finds a member's organisations
	// Operators of the console and their audit log (operators.go); 0x25 is kept for them.
	prefixOperator     byte = 0x22 // operator id -> operatorRecord (JSON)
	prefixOperatorSess byte = 0x23 // SHA-256 digest of a console session token -> opSessionRecord (JSON), Badger TTL = expiry
	prefixAudit        byte = 0x24 // time (unix ns, uint64 BE) + audit id -> AuditRecord (JSON), kept for good
	// Redemption codes (codes.go), kept for good.
	prefixCode       byte = 0x26 // code id -> codeRecord (JSON): the code's SHA-256 digest, never the code
	prefixCodeHash   byte = 0x27 // SHA-256 digest of a normalised code (32 bytes) -> code id
	prefixCodeRedeem byte = 0x28 // code id + acct id -> CodeRedemption (JSON)
	// Credits that expire (expiry.go), dropped once spent or expired.
	prefixLot    byte = 0x29 // acct id + grant entry seq (uint64 BE) -> ledger.Lot (JSON)
	prefixLotDue byte = 0x31 // expiry (unix ns, uint64 BE) + acct id + grant entry seq (uint64 BE) -> empty: the lots by expiry, for the sweep
	// Automatic top-ups (topups.go), kept for good.
	prefixTopUpRule byte = 0x2A // acct id -> ledger.TopUpRule (JSON)
	prefixTopUp     byte = 0x2B // acct id + top-up id -> ledger.TopUp (JSON)
	prefixTopUpID   byte = 0x2C // top-up id -> acct id
	// Alerts to the account's own endpoints (alerts.go); ended deliveries kept for ledger.AlertKeep.
	prefixAlertEndpoint byte = 0x2D // acct id + endpoint id -> ledger.AlertEndpoint (JSON), its secret sealed by the caller
	prefixAlertDelivery byte = 0x2E // acct id + delivery id -> ledger.AlertDelivery (JSON)
	prefixAlertDue      byte = 0x2F // delivery id -> acct id: present while the delivery is pending
	prefixAlertNote     byte = 0x30 // acct id + occurrence key -> until (unix ns, decimal; 0: for good), Badger TTL = until
	// In the kept generations' own directory only (kept.go); a code far from the
	// ledger's, whose codes grow from 0x10.
	prefixGenExpiry byte = 0x40 // expiry (unix seconds, uint64 BE) + acct id + len(request id) + request id -> empty, or a final put's sweepEntry (generations.go)
)

func key1(p byte, a string) []byte {
	k := make([]byte, 0, 1+len(a))
	return append(append(k, p), a...)
}

func key2(p byte, a, b string) []byte {
	k := make([]byte, 0, 1+len(a)+len(b))
	return append(append(append(k, p), a...), b...)
}

func accountKey(id string) []byte          { return key1(prefixAccount, id) }
func emailKey(email string) []byte         { return key1(prefixEmail, email) }
func balanceKey(id string) []byte          { return key1(prefixBalance, id) }
func keyRecordKey(acct, kid string) []byte { return key2(prefixKey, acct, kid) }
func holdKey(acct, rid string) []byte      { return key2(prefixHold, acct, rid) }
func openHoldKey(acct, rid string) []byte  { return key2(prefixOpenHold, acct, rid) }
func grantRefKey(acct, ref string) []byte  { return key2(prefixGrantRef, acct, ref) }
func idemKey(acct, k string) []byte        { return key2(prefixIdem, acct, k) }

func keyHashKey(d [32]byte) []byte {
	return append([]byte{prefixKeyHash}, d[:]...)
}

func entryKey(acct string, seq uint64) []byte {
	k := make([]byte, 0, 1+len(acct)+8)
	k = append(append(k, prefixEntry), acct...)
	return binary.BigEndian.AppendUint64(k, seq)
}

// entryPrefix is every entry of one account, or of all accounts when acct is "".
func entryPrefix(acct string) []byte { return key1(prefixEntry, acct) }

var metaSchemaKey = []byte{prefixMeta, 's', 'c', 'h', 'e', 'm', 'a'}

// schemaVersion is written when a directory is first opened; Open refuses a newer one.
const schemaVersion = "1"

func credentialKey(acct string) []byte { return key1(prefixCredential, acct) }

func sessionKey(d [32]byte) []byte { return append([]byte{prefixSession}, d[:]...) }

func acctSessionKey(acct string, d [32]byte) []byte {
	k := make([]byte, 0, 1+len(acct)+len(d))
	return append(append(append(k, prefixAcctSession), acct...), d[:]...)
}

func generationKey(acct, rid string) []byte { return key2(prefixGeneration, acct, rid) }

// genChunkPrefix is every chunk of one generation. The request id's length comes first, so
// that one id's chunks never share a prefix with a longer id's.
func genChunkPrefix(acct, rid string) []byte {
	k := make([]byte, 0, 2+len(acct)+len(rid)+4)
	k = append(append(k, prefixGenChunk), acct...)
	return append(append(k, byte(len(rid))), rid...)
}

func genChunkKey(acct, rid string, n int) []byte {
	return binary.BigEndian.AppendUint32(genChunkPrefix(acct, rid), uint32(n))
}

// genExpiryKey indexes a generation by the end of its window, so that the sweep reads only what
// is due.
func genExpiryKey(exp int64, acct, rid string) []byte {
	k := make([]byte, 0, 1+8+len(acct)+1+len(rid))
	k = binary.BigEndian.AppendUint64(append(k, prefixGenExpiry), uint64(exp))
	return append(append(append(k, acct...), byte(len(rid))), rid...)
}

// parseGenExpiryKey is genExpiryKey's inverse; ok is false for a malformed key.
func parseGenExpiryKey(k []byte) (exp int64, acct, rid string, ok bool) {
	if len(k) < 1+8+ledger.AccountIDLen+1 || k[0] != prefixGenExpiry {
		return 0, "", "", false
	}
	exp = int64(binary.BigEndian.Uint64(k[1:9]))
	acct = string(k[9 : 9+ledger.AccountIDLen])
	n := int(k[9+ledger.AccountIDLen])
	if len(k) != 9+ledger.AccountIDLen+1+n {
		return 0, "", "", false
	}
	return exp, acct, string(k[10+ledger.AccountIDLen:]), true
}
