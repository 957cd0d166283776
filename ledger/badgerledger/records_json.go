package badgerledger

import (
	"cmp"
	"strconv"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
	"github.com/caddy-textgen/textgen/ledger/jsonenc"
)

// Hand-written JSON encoders for the records the Badger engine writes on every generate
// request: the hold's and the settle's Entry, the holdRecord (written at the hold and again at
// its resolution), the account's balanceRecord and, with retention on, the kept generation's
// GenerationRecord. mustJSON (encoding/json, by reflection) was about 9 us of a ~270 us request
// at 64 clients, plus its allocations, and 2 us of the kept store's 11 us a generation; these
// write the same bytes with one allocation.
//
// Their output must stay BYTE-IDENTICAL to json.Marshal of the same value: records already on
// disk are JSON, read back with json.Unmarshal, and the format must not change. So they copy
// what encoding/json does: field order and names from the struct tags, omitempty (zero number,
// empty string) and omitzero (time.Time.IsZero) exactly where the tags say, strings escaped
// with encoding/json's HTML-safe rules, time.Time as its MarshalJSON writes it. A time that
// MarshalJSON refuses (year outside [0,9999], zone offset of 24 hours or more) makes these
// return an error, as json.Marshal does; entryJSON and the others then hand the value to
// mustJSON, which panics with json.Marshal's own message, as before.
//
// records_json_test.go keeps them equal to encoding/json: a property test and a fuzz
// target fill EVERY field of each type by reflection (a field added to a struct and not here
// makes them fail) and compare the bytes with json.Marshal's. Everything else stays on mustJSON.

// entryJSON is mustJSON(e), faster.
func entryJSON(e *ledger.Entry) []byte {
	// 205 bytes of names and punctuation, 5 numbers of at most 20 digits, a time of at most 35
	// bytes: one allocation unless strings need escaping.
	n := 340 + len(e.AccountID) + len(e.Kind) + len(e.Mode) + len(e.RequestID) + len(e.KeyID) +
		len(e.Tool) + len(e.Reference) + len(e.Reason) + len(e.Currency)
	b, err := appendEntryJSON(make([]byte, 0, n), e)
	if err != nil {
		return mustJSON(*e) // panics, with json.Marshal's message
	}
	return b
}

// holdRecordJSON is mustJSON(r), faster.
func holdRecordJSON(r *holdRecord) []byte {
	// 155 bytes of names and punctuation, 2 numbers of at most 20 digits, 3 times of at most 35.
	n := 300 + 40*len(r.Lots) + len(r.AccountID) + len(r.RequestID) + len(r.Mode) + len(r.State) + len(r.KeyID) +
		len(r.Tool) + len(r.Reason)
	b, err := appendHoldRecordJSON(make([]byte, 0, n), r)
	if err != nil {
		return mustJSON(*r) // panics, with json.Marshal's message
	}
	return b
}

// generationJSON is mustJSON(r), faster.
func generationJSON(r *ledger.GenerationRecord) []byte {
	return appendGeneration(make([]byte, 0, generationJSONSize(r)), r)
}

// generationJSONSize is about the most generationJSON(r) takes.
func generationJSONSize(r *ledger.GenerationRecord) int {
	// 170 bytes of names and punctuation, 4 numbers of at most 20 digits, 3 times of at most 35.
	return 360 + len(r.AccountID) + len(r.RequestID) + len(r.Mode) + len(r.Tool) + len(r.Language) + len(r.State) + len(r.FinishReason)
}

// appendGeneration is append(dst, mustJSON(r)...), faster.
func appendGeneration(dst []byte, r *ledger.GenerationRecord) []byte {
	b, err := appendGenerationJSON(dst, r)
	if err != nil {
		return mustJSON(*r) // panics, with json.Marshal's message
	}
	return b
}

// balanceRecordJSON is mustJSON(r), faster.
func balanceRecordJSON(r *balanceRecord) []byte {
	b, _ := appendBalanceRecordJSON(make([]byte, 0, 100), r) // 40 bytes and 3 numbers of <= 20 digits
	return b
}

// appendEntryJSON appends json.Marshal(e) to dst. The error is json.Marshal's only possible one:
// a time MarshalJSON refuses.
func appendEntryJSON(dst []byte, e *ledger.Entry) ([]byte, error) {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"account_id":`...)
	dst = jsonenc.AppendString(dst, e.AccountID)
	dst = append(dst, `,"kind":`...)
	dst = jsonenc.AppendString(dst, string(e.Kind))
	dst = append(dst, `,"mode":`...)
	dst = jsonenc.AppendString(dst, string(e.Mode))
	dst = append(dst, `,"amount":`...)
	dst = strconv.AppendInt(dst, e.Amount, 10)
	dst = append(dst, `,"balance_after":`...)
	dst = strconv.AppendInt(dst, e.BalanceAfter, 10)
	dst = append(dst, `,"available_after":`...)
	dst = strconv.AppendInt(dst, e.AvailableAfter, 10)
	dst = appendOmitEmpty(dst, `,"request_id":`, e.RequestID)
	dst = appendOmitEmpty(dst, `,"key_id":`, e.KeyID)
	dst = appendOmitEmpty(dst, `,"tool":`, e.Tool)
	dst = appendOmitEmpty(dst, `,"reference":`, e.Reference)
	dst = appendOmitEmpty(dst, `,"reason":`, e.Reason)
	if e.AmountCents != 0 {
		dst = append(dst, `,"amount_cents":`...)
		dst = strconv.AppendInt(dst, e.AmountCents, 10)
	}
	dst = appendOmitEmpty(dst, `,"currency":`, e.Currency)
	if e.Credits != 0 {
		dst = append(dst, `,"credits":`...)
		dst = strconv.AppendInt(dst, e.Credits, 10)
	}
	dst = append(dst, `,"time":`...)
	dst, err := appendJSONTime(dst, e.Time)
	return append(dst, '}'), err
}

// appendHoldRecordJSON appends json.Marshal(r) to dst; the error as for appendEntryJSON.
func appendHoldRecordJSON(dst []byte, r *holdRecord) ([]byte, error) {
	var err, err2 error
	dst = appendRecordHead(dst, r.AccountID, r.RequestID, r.Mode)
	dst = append(dst, `,"state":`...)
	dst = jsonenc.AppendString(dst, string(r.State))
	dst = appendOmitEmpty(dst, `,"key_id":`, r.KeyID)
	dst = appendOmitEmpty(dst, `,"tool":`, r.Tool)
	dst = append(dst, `,"created":`...)
	dst, err = appendJSONTime(dst, r.Created)
	dst = append(dst, `,"expires":`...)
	dst, err2 = appendJSONTime(dst, r.Expires)
	err = cmp.Or(err, err2)
	dst = append(dst, `,"hold_seq":`...)
	dst = strconv.AppendUint(dst, r.HoldSeq, 10)
	if !r.Resolved.IsZero() { // omitzero: time.Time's IsZero
		dst = append(dst, `,"resolved":`...)
		dst, err2 = appendJSONTime(dst, r.Resolved)
		err = cmp.Or(err, err2)
	}
	if r.ResolveSeq != 0 {
		dst = append(dst, `,"resolve_seq":`...)
		dst = strconv.AppendUint(dst, r.ResolveSeq, 10)
	}
	dst = appendOmitEmpty(dst, `,"reason":`, r.Reason)
	if r.Credits != 0 {
		dst = append(dst, `,"credits":`...)
		dst = strconv.AppendInt(dst, r.Credits, 10)
	}
	if len(r.Lots) > 0 {
		dst = append(dst, `,"lots":[`...)
		for i, t := range r.Lots {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"seq":`...)
			dst = strconv.AppendUint(dst, t.Seq, 10)
			dst = append(dst, `,"credits":`...)
			dst = strconv.AppendInt(dst, t.Credits, 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), err
}

// appendBalanceRecordJSON appends json.Marshal(r) to dst; it never fails (the error is there
// for the same shape as the others).
func appendBalanceRecordJSON(dst []byte, r *balanceRecord) ([]byte, error) {
	dst = append(dst, `{"balance":`...)
	dst = strconv.AppendInt(dst, r.Balance, 10)
	dst = append(dst, `,"test_balance":`...)
	dst = strconv.AppendInt(dst, r.TestBalance, 10)
	dst = append(dst, `,"next_seq":`...)
	dst = strconv.AppendUint(dst, r.NextSeq, 10)
	return append(dst, '}'), nil
}

// appendGenerationJSON appends json.Marshal(r) to dst; the error as for appendEntryJSON.
func appendGenerationJSON(dst []byte, r *ledger.GenerationRecord) ([]byte, error) {
	var err, err2 error
	dst = appendRecordHead(dst, r.AccountID, r.RequestID, r.Mode)
	dst = appendOmitEmpty(dst, `,"tool":`, r.Tool)
	dst = appendOmitEmpty(dst, `,"language":`, r.Language)
	dst = append(dst, `,"state":`...)
	dst = jsonenc.AppendString(dst, string(r.State))
	dst = append(dst, `,"created":`...)
	dst, err = appendJSONTime(dst, r.Created)
	if !r.Finished.IsZero() { // omitzero: time.Time's IsZero
		dst = append(dst, `,"finished":`...)
		dst, err2 = appendJSONTime(dst, r.Finished)
		err = cmp.Or(err, err2)
	}
	dst = append(dst, `,"expires":`...)
	dst, err2 = appendJSONTime(dst, r.Expires)
	err = cmp.Or(err, err2)
	if r.OutputTokens != 0 {
		dst = append(dst, `,"output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.OutputTokens), 10)
	}
	dst = appendOmitEmpty(dst, `,"finish_reason":`, r.FinishReason)
	dst = append(dst, `,"pieces":`...)
	dst = strconv.AppendInt(dst, int64(r.Pieces), 10)
	dst = append(dst, `,"bytes":`...)
	dst = strconv.AppendInt(dst, r.Bytes, 10)
	dst = append(dst, `,"chunks":`...)
	dst = strconv.AppendInt(dst, int64(r.Chunks), 10)
	return append(dst, '}'), err
}

// appendRecordHead opens a record whose first members are its account, request id and mode (a
// hold record's, a kept generation's).
func appendRecordHead(dst []byte, acct, rid string, m ledger.Mode) []byte {
	dst = append(dst, `{"account_id":`...)
	dst = jsonenc.AppendString(dst, acct)
	dst = append(dst, `,"request_id":`...)
	dst = jsonenc.AppendString(dst, rid)
	dst = append(dst, `,"mode":`...)
	return jsonenc.AppendString(dst, string(m))
}

// appendOmitEmpty appends the member name (its comma, quoted name and colon) and s, unless s is
// empty: a string field tagged omitempty.
func appendOmitEmpty(dst []byte, name, s string) []byte {
	if s == "" {
		return dst
	}
	return jsonenc.AppendString(append(dst, name...), s)
}

// appendJSONTime appends t as time.Time.MarshalJSON writes it: RFC 3339 with nanoseconds (trailing
// zeros dropped) in t's own zone. AppendText is the same strict RFC 3339 form MarshalJSON uses,
// with the same refusals (year outside [0,9999], offset hours outside [0,23]).
func appendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	out, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, err // AppendText returns nil then
	}
	return append(out, '"'), nil
}
