package ledger

import (
	"context"
	"time"
)

// Moving a ledger from one engine to another (CopyLedger: Badger to PostgreSQL). The Store API
// hands out neither key digests nor password hashes nor hold records, on purpose; an engine
// that can be copied from implements Exporter, which hands out every record as it is stored,
// in these engine-neutral types.

// Exporter is an engine whose whole ledger can be read out for a copy.
type Exporter interface {
	// Export gives sink every record of the ledger, from one consistent view of it: first every
	// account, then the other records, each of which names an account given before. It stops
	// at the first error of sink or ctx. Copy a ledger that no one is changing meanwhile (stop
	// the server first): changes made during Export may or may not be in it.
	Export(ctx context.Context, sink ExportSink) error
}

// ExportSink receives the records of an Export.
type ExportSink interface {
	Account(ExportAccount) error
	Key(ExportKey) error
	Hold(ExportHold) error
	Entry(Entry) error
	Credential(ExportCredential) error
	Session(ExportSession) error
	Idempotency(IdempotencyRecord) error
	// UnmatchedPayment is a payment that credited nothing (Payments); its account may not exist.
	UnmatchedPayment(UnmatchedPayment) error
	// Payment is a payment that refunds and disputes name (Reversals); its account may not
	// exist. Every payment comes before the reversals that name it.
	Payment(Payment) error
	// Reversal is a refund or dispute as applied; its entries are among the account's.
	Reversal(Reversal) error
	// Mail is a queued e-mail as stored, its sealed bytes as the caller gave them, with its
	// attempts, next attempt, last error, and the claim and lease of a sender that held it
	// (zero if none). Its AccountID, if any, is not checked: EnqueueMail does not check it.
	Mail(MailMessage) error
	// Token is a live single-use token (verify, reset, invite); used and expired ones are not
	// given.
	Token(ExportToken) error
	// ReceiptKey is a receipt signing key, its private half sealed as it was (Receipts).
	ReceiptKey(ReceiptKey) error
	// ReceiptDigest is the digest of a charged generation's text (Receipts).
	ReceiptDigest(ReceiptDigestRecord) error
	// Membership is a member of an organisation (Members; Email, OrgEmail and Used unset), and
	// MemberUsage what one member's keys took in one month; both come after every account.
	Membership(Membership) error
	MemberUsage(ExportMemberUsage) error
	// Operator is a console operator as stored: password hash, sealed TOTP secret (the
	// instances on the copy need the same console key), last TOTP step and the digests of the
	// recovery codes not used yet. Console sessions are not copied: operators log in again.
	Operator(ExportOperator) error
	// Audit is one record of the audit log, as it was appended.
	Audit(AuditRecord) error
	// Code is a redemption code as stored (its digest, never the code), with its uses; every
	// code comes before its redemptions. CodeRedemption is one account's redemption of it
	// (Email unset); its entry is among the account's.
	Code(ExportCode) error
	CodeRedemption(CodeRedemption) error
	// TopUpRule is an account's saved card and automatic top-up rule, and TopUp one automatic
	// purchase with its status (TopUps); both come after every account.
	TopUpRule(TopUpRule) error
	TopUp(TopUp) error
	// AlertEndpoint is an account's alert endpoint, its secret sealed as it was (the instances
	// on the copy need the same key); AlertDelivery one delivery to it, pending or kept after it
	// ended. Every endpoint comes before the deliveries, and both after every account.
	AlertEndpoint(AlertEndpoint) error
	AlertDelivery(AlertDelivery) error
}

// ExportCode is a redemption code with the digest it is found by.
type ExportCode struct {
	RedemptionCode
	Digest [32]byte
}

// ExportMemberUsage is what one member's keys took of organisation OrgID in one UTC month.
type ExportMemberUsage struct {
	OrgID, MemberID, Month string
	Credits                int64
}

// ExportOperator is an operator with what it logs in with.
type ExportOperator struct {
	Operator
	Hash       string
	TOTPSealed []byte
	LastStep   int64
	Recovery   [][32]byte
}

// ExportAccount is an account with the figures its store keeps: balances, open holds and the
// number of its next entry (what Verify recomputes from the entries).
type ExportAccount struct {
	Account
	Balance, Held, TestBalance, TestHeld int64
	NextSeq                              uint64
	// Lots are the account's credits that expire (expiry.go), sorted by SortLots.
	Lots []Lot
}

// ExportKey is a key's stored part with the SHA-256 digest of the full key, which LookupKey
// finds it by.
type ExportKey struct {
	Key
	Digest [32]byte
	// PrevDigest is the digest of the secret a roll replaced, found until Key.GraceUntil; zero
	// when there is none.
	PrevDigest [32]byte
}

// ExportHold is a hold, open or resolved, as its store keeps it.
type ExportHold struct {
	AccountID, RequestID string
	Mode                 Mode
	State                HoldState
	KeyID, Tool          string
	Created, Expires     time.Time
	HoldSeq              uint64    // the number of its hold entry
	Resolved             time.Time // zero while open
	ResolveSeq           uint64    // the number of its settle or void entry; 0 while open
	Reason               string
	Credits              int64 // what it reserved (HeldCredits)
	// Lots is what the hold took of the account's expiring credits, while it is open.
	Lots []LotTake
}

// ExportCredential is an account's password: its argon2id hash in PHC form (password.go).
type ExportCredential struct {
	AccountID, Hash string
	Updated         time.Time
}

// ExportSession is a browser session under the SHA-256 digest of its token.
type ExportSession struct {
	Digest           [32]byte
	AccountID        string
	Created, Expires time.Time
	CSRFToken        string
}

// ExportToken is a single-use token (Mail) under the SHA-256 digest of the token, which is
// never stored.
type ExportToken struct {
	Digest    [32]byte
	AccountID string
	Purpose   TokenPurpose
	Expires   time.Time
}
