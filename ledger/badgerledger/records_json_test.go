package badgerledger

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// The hand-written encoders of records_json.go must write exactly what json.Marshal
// writes. The values compared here are filled by reflection, field by field, so that a field
// added to Entry, holdRecord or balanceRecord is filled too and, until the encoder writes it,
// makes these tests fail; a field of a type fillRecord does not know fails them at once.

// recordSource is where fillRecord takes its choices: a seeded PRNG (property test) or the fuzzer's
// bytes.
type recordSource interface {
	intn(n int) int
	u64() uint64
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int { return s.r.IntN(n) }
func (s randSource) u64() uint64    { return s.r.Uint64() }

// byteSource reads its choices from b; once b is used up every choice is 0.
type byteSource struct{ b []byte }

func (s *byteSource) u64() uint64 {
	var x [8]byte
	n := copy(x[:], s.b)
	s.b = s.b[n:]
	return binary.LittleEndian.Uint64(x[:])
}

func (s *byteSource) intn(n int) int {
	if len(s.b) == 0 {
		return 0
	}
	var x uint64
	if n <= 256 {
		x = uint64(s.b[0])
		s.b = s.b[1:]
	} else {
		x = s.u64()
	}
	return int(x % uint64(n))
}

// trickyPieces are the parts random strings are made of besides plain ASCII and raw bytes:
// everything encoding/json escapes, and valid and invalid UTF-8.
var trickyPieces = []string{
	`"`, `\`, "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f", "<", ">", "&",
	"\u2028", "\u2029", "\u2027", "\u202a", "é", "日本", "😀", "\ufffd", "\xff", "\xc3", "\xe2\x80",
	"\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "/", "'", "+", "=", "req_01HX", "\u00a0",
}

func genString(src recordSource, nonEmpty bool) string {
	n := src.intn(24)
	if nonEmpty && n == 0 {
		n = 1
	}
	var b strings.Builder
	for range n {
		switch src.intn(4) {
		case 0:
			b.WriteByte(byte(0x20 + src.intn(0x5f))) // printable ASCII
		case 1:
			b.WriteByte(byte(src.intn(256))) // any byte
		default:
			b.WriteString(trickyPieces[src.intn(len(trickyPieces))])
		}
	}
	return b.String()
}

func genInt64(src recordSource) int64 {
	switch src.intn(6) {
	case 0:
		return []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32, 1 << 40}[src.intn(8)]
	case 1:
		return int64(src.intn(2001)) - 1000
	default:
		return int64(src.u64())
	}
}

func genUint64(src recordSource) uint64 {
	switch src.intn(4) {
	case 0:
		return []uint64{0, 1, math.MaxUint64, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint32}[src.intn(6)]
	case 1:
		return uint64(src.intn(100000))
	default:
		return src.u64()
	}
}

var namedZones = func() (zs []*time.Location) {
	for _, name := range []string{"America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham", "Europe/Dublin"} {
		if l, err := time.LoadLocation(name); err == nil {
			zs = append(zs, l)
		}
	}
	return zs
}()

func genZone(src recordSource) *time.Location {
	switch src.intn(6) {
	case 0, 1:
		return time.UTC
	case 2:
		return time.Local
	case 3:
		if len(namedZones) > 0 {
			return namedZones[src.intn(len(namedZones))]
		}
		return time.UTC
	case 4: // whole quarter hours, as real zones have
		return time.FixedZone("", (src.intn(4*28)-4*14)*15*60)
	default: // any offset: seconds, and 24 hours or more, which MarshalJSON refuses
		return time.FixedZone("X", src.intn(2*30*3600)-30*3600)
	}
}

func genTime(src recordSource, nonZero bool) time.Time {
	var t time.Time
	switch src.intn(8) {
	case 0:
		t = time.Time{}
	case 1:
		t = time.Time{}.In(genZone(src)) // the zero instant elsewhere: still IsZero
	case 2:
		t = time.Now() // with a monotonic reading
	case 3: // around the limits of [0,9999]
		edge := []time.Time{
			time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
			time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		}[src.intn(4)]
		t = edge.Add(time.Duration(src.intn(200001)-100000) * time.Second)
	default:
		// years 1970..2100, sometimes 0..9999
		secs := int64(src.u64() % (130 * 365 * 86400))
		t = time.Unix(secs, 0)
		if src.intn(4) == 0 {
			t = time.Date(src.intn(10000), time.January, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(secs) * time.Second)
		}
	}
	if !t.IsZero() {
		switch src.intn(4) {
		case 0: // whole seconds
		case 1:
			t = t.Add(time.Duration(src.intn(1000)) * time.Millisecond)
		case 2:
			t = t.Add(time.Duration(src.intn(1000000)) * time.Microsecond)
		default:
			t = t.Add(time.Duration(src.intn(1000000000)))
		}
		t = t.In(genZone(src))
	}
	if nonZero && t.IsZero() {
		t = time.Unix(1, 1).UTC()
	}
	return t
}

var timeType = reflect.TypeFor[time.Time]()

// fillRecord sets every field of the struct p points to to a random value; with allSet no field
// is left zero, otherwise about one in four is.
func fillRecord(t testing.TB, src recordSource, p any, allSet bool) {
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !allSet && src.intn(4) == 0 {
			f.SetZero()
			continue
		}
		switch {
		case sf.Type == timeType:
			f.Set(reflect.ValueOf(genTime(src, allSet)))
		case sf.Type.Kind() == reflect.String:
			f.SetString(genString(src, allSet))
		case sf.Type.Kind() == reflect.Int64 || sf.Type.Kind() == reflect.Int:
			x := genInt64(src)
			if allSet && x == 0 {
				x = -7
			}
			f.SetInt(x)
		case sf.Type.Kind() == reflect.Uint64:
			x := genUint64(src)
			if allSet && x == 0 {
				x = 7
			}
			f.SetUint(x)
		case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
			n := int(genUint64(src) % 4)
			if allSet && n == 0 {
				n = 2
			}
			sl := reflect.MakeSlice(sf.Type, n, n)
			for j := range n {
				fillRecord(t, src, sl.Index(j).Addr().Interface(), allSet)
			}
			f.Set(sl)
		default:
			t.Fatalf("%s.%s is a %s: teach fillRecord (records_json_test.go) and the encoder (records_json.go) about it",
				v.Type(), sf.Name, sf.Type)
		}
		if allSet && f.IsZero() {
			t.Fatalf("fillRecord left %s.%s zero", v.Type(), sf.Name)
		}
	}
}

// checkRecordJSON compares the encoder of p's type with json.Marshal(*p): the same bytes, or
// both an error. Appending to a non-empty dst must keep what was there.
func checkRecordJSON(t testing.TB, p any) {
	t.Helper()
	want, wantErr := json.Marshal(reflect.ValueOf(p).Elem().Interface())
	prefix := []byte("prefix")
	var got []byte
	var err error
	switch p := p.(type) {
	case *ledger.Entry:
		got, err = appendEntryJSON(prefix, p)
	case *holdRecord:
		got, err = appendHoldRecordJSON(prefix, p)
	case *balanceRecord:
		got, err = appendBalanceRecordJSON(prefix, p)
	case *ledger.GenerationRecord:
		got, err = appendGenerationJSON(prefix, p)
	default:
		t.Fatalf("no encoder for %T", p)
	}
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("%T: %q lost the bytes it appended to", p, got)
	}
	got = got[len("prefix"):]
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%T %#v:\nencoder error: %v\njson.Marshal error: %v", p, p, err, wantErr)
	}
	if wantErr != nil {
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%T %#v:\nencoder:      %s\njson.Marshal: %s", p, p, got, want)
	}
}

func checkAllRecordsJSON(t testing.TB, src recordSource, allSet bool) {
	t.Helper()
	var e ledger.Entry
	fillRecord(t, src, &e, allSet)
	checkRecordJSON(t, &e)
	var h holdRecord
	fillRecord(t, src, &h, allSet)
	checkRecordJSON(t, &h)
	var b balanceRecord
	fillRecord(t, src, &b, allSet)
	checkRecordJSON(t, &b)
	var g ledger.GenerationRecord
	fillRecord(t, src, &g, allSet)
	checkRecordJSON(t, &g)
}

// TestRecordJSONProperty: thousands of random values of each type, with every field set and with
// random fields left zero, plus the zero values.
func TestRecordJSONProperty(t *testing.T) {
	checkRecordJSON(t, &ledger.Entry{})
	checkRecordJSON(t, &holdRecord{})
	checkRecordJSON(t, &balanceRecord{})
	checkRecordJSON(t, &ledger.GenerationRecord{})
	src := randSource{rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))}
	for i := range 10000 {
		checkAllRecordsJSON(t, src, i%2 == 0)
	}
}

// TestRecordJSONCases: the cases named in records_json.go, spelled out.
func TestRecordJSONCases(t *testing.T) {
	ny := time.FixedZone("EST", -5*3600)
	for _, s := range []string{"", `"\`, "<a href='x'>&amp;</a>", "\u2028\u2029", "\x00\x1f\x7f\b\f\n\r\t", "\xff\xfe", "ok é 😀"} {
		checkRecordJSON(t, &ledger.Entry{AccountID: s, Kind: ledger.EntryKind(s), Mode: ledger.Mode(s), RequestID: s, Reason: s, Time: time.Date(2026, 1, 2, 3, 4, 5, 600, ny)})
		checkRecordJSON(t, &holdRecord{AccountID: s, State: ledger.HoldState(s), Tool: s, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Resolved: time.Time{}.In(ny)})
	}
	checkRecordJSON(t, &ledger.Entry{Seq: math.MaxUint64, Amount: math.MinInt64, BalanceAfter: math.MaxInt64, AmountCents: -1})
	checkRecordJSON(t, &holdRecord{HoldSeq: math.MaxUint64, ResolveSeq: 1, Resolved: time.Unix(0, 1)})
	checkRecordJSON(t, &balanceRecord{Balance: math.MinInt64, TestBalance: -1, NextSeq: math.MaxUint64})
}

// TestRecordJSONRefusedTime: a time MarshalJSON refuses makes the encoder fail and the wrappers
// panic as mustJSON does, with the same message.
func TestRecordJSONRefusedTime(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)),
	} {
		e := ledger.Entry{Time: tm}
		h := holdRecord{Resolved: tm}
		checkRecordJSON(t, &e)
		checkRecordJSON(t, &h)
		if got, want := panicOf(func() { entryJSON(&e) }), panicOf(func() { mustJSON(e) }); got == "" || got != want {
			t.Errorf("entryJSON(%v) panicked with %q, mustJSON with %q", tm, got, want)
		}
		if got, want := panicOf(func() { holdRecordJSON(&h) }), panicOf(func() { mustJSON(h) }); got == "" || got != want {
			t.Errorf("holdRecordJSON(%v) panicked with %q, mustJSON with %q", tm, got, want)
		}
	}
}

func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// TestRecordJSONWrappers: entryJSON and the others are the encoders on a fresh buffer.
func TestRecordJSONWrappers(t *testing.T) {
	src := randSource{rand.New(rand.NewPCG(2, 3))}
	for range 200 {
		var e ledger.Entry
		fillRecord(t, src, &e, false)
		e.Time = e.Time.UTC()
		var h holdRecord
		fillRecord(t, src, &h, false)
		h.Created, h.Expires, h.Resolved = h.Created.UTC(), h.Expires.UTC(), h.Resolved.UTC()
		var b balanceRecord
		fillRecord(t, src, &b, false)
		if _, err := json.Marshal(e); err != nil {
			continue // a year outside [0,9999]: TestRecordJSONRefusedTime
		}
		if _, err := json.Marshal(h); err != nil {
			continue
		}
		for _, c := range []struct {
			got []byte
			v   any
		}{{entryJSON(&e), e}, {holdRecordJSON(&h), h}, {balanceRecordJSON(&b), b}} {
			if want := mustJSON(c.v); !bytes.Equal(c.got, want) {
				t.Fatalf("%T: %s, mustJSON: %s", c.v, c.got, want)
			}
		}
	}
}

// FuzzRecordJSON: the fuzzer's bytes choose the values of every field of each of the four
// records, compared with json.Marshal.
func FuzzRecordJSON(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("<>&\u2028\u2029\xff\"\\\n\r\t\x00\x7f 2026-01-02T03:04:05.123456789+05:30"))
	src := rand.New(rand.NewPCG(4, 5))
	for range 8 {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(src.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{data}
		allSet := src.intn(2) == 0
		checkAllRecordsJSON(t, src, allSet)
	})
}

// BenchmarkRecordJSON: each record type through mustJSON and through its encoder, with values
// like those of a hold and its settle.
func BenchmarkRecordJSON(b *testing.B) {
	t := time.Now().UTC()
	e := ledger.Entry{Seq: 123457, AccountID: "acct_01J8ZK3Q4W5E6R7T8Y9U0I1O2P", Kind: ledger.KindSettle, Mode: ledger.Live,
		Amount: -1, BalanceAfter: 1<<40 - 61728, AvailableAfter: 1<<40 - 61730,
		RequestID: "req_01J8ZK3Q4W5E6R7T8Y9U0I1O2P", KeyID: "key_01J8ZK3Q4W5E6R7T8Y9U0I1O2P", Tool: "summarize", Time: t}
	h := holdRecord{AccountID: e.AccountID, RequestID: e.RequestID, Mode: ledger.Live, State: ledger.HoldSettled, KeyID: e.KeyID,
		Tool: e.Tool, Created: t, Expires: t.Add(ledger.DefaultHoldTTL), HoldSeq: 123456, Resolved: t, ResolveSeq: 123457}
	r := balanceRecord{Balance: 1<<40 - 61728, TestBalance: 100, NextSeq: 123458}
	g := ledger.GenerationRecord{AccountID: e.AccountID, RequestID: e.RequestID, Mode: ledger.Live, Tool: e.Tool, Language: "en",
		State: ledger.GenerationCompleted, Created: t, Finished: t, Expires: t.Add(time.Hour), OutputTokens: 40, FinishReason: "stop",
		Pieces: 8, Bytes: 200, Chunks: 1}
	var sink []byte
	for _, c := range []struct {
		name      string
		json, enc func() []byte
	}{
		{"entry", func() []byte { return mustJSON(e) }, func() []byte { return entryJSON(&e) }},
		{"hold", func() []byte { return mustJSON(h) }, func() []byte { return holdRecordJSON(&h) }},
		{"balance", func() []byte { return mustJSON(r) }, func() []byte { return balanceRecordJSON(&r) }},
		{"generation", func() []byte { return mustJSON(g) }, func() []byte { return generationJSON(&g) }},
	} {
		b.Run(c.name+"/mustJSON", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.json()
			}
		})
		b.Run(c.name+"/encoder", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.enc()
			}
		})
	}
	_ = sink
}
