// Command verify-receipt checks a signed receipt of a caddy-textgen server with nothing but the
// server's published public keys: standard library only, so an accountant can run it as it is.
//
//	curl -s https://api.example.com/.well-known/textgen-receipt-keys > keys.json
//	go run main.go -keys keys.json receipt.json
//	go run main.go -keys keys.json -text answer.txt receipt.json
//
// It prints the receipt and "valid" and exits 0, or says why not and exits 1. -text also checks
// that a generation's receipt names the SHA-256 of that file (the text as received).
//
// The signature is Ed25519 over the receipt's canonical JSON (RFC 8785, JSON Canonicalization
// Scheme). A receipt holds only strings and integers, so its canonical form is simple: the
// members sorted by name, no spaces, strings escaped as JSON.stringify does, integers in
// decimal. canonical below writes exactly that. RFC 8785 also requires that no object have a
// member name twice: such a file is refused (noDuplicateNames).
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
)

type signed struct {
	Receipt   json.RawMessage `json:"receipt"`
	Signature string          `json:"signature"`
	KeyID     string          `json:"key_id"`
}

type keySet struct {
	Keys []struct {
		KeyID     string `json:"key_id"`
		Algorithm string `json:"algorithm"`
		PublicKey string `json:"public_key"`
	} `json:"keys"`
}

func main() {
	keysFile := flag.String("keys", "", "the server's key list (JSON of /.well-known/textgen-receipt-keys); required")
	textFile := flag.String("text", "", "the text of the generation, to check against the receipt's text_sha256")
	flag.Parse()
	if *keysFile == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: verify-receipt -keys keys.json [-text answer.txt] receipt.json")
		os.Exit(2)
	}
	fields, err := verify(*keysFile, flag.Arg(0), *textFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "NOT VALID:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("%s: %v\n", k, fields[k])
	}
	fmt.Println("valid")
}

func verify(keysFile, receiptFile, textFile string) (map[string]any, error) {
	var set keySet
	if err := readJSON(keysFile, &set); err != nil {
		return nil, err
	}
	var sr signed
	if err := readJSON(receiptFile, &sr); err != nil {
		return nil, err
	}
	var pub ed25519.PublicKey
	for _, k := range set.Keys {
		if k.KeyID == sr.KeyID && k.Algorithm == "Ed25519" {
			b, err := base64.RawURLEncoding.DecodeString(k.PublicKey)
			if err != nil || len(b) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("the listed key %s is malformed", k.KeyID)
			}
			pub = b
		}
	}
	if pub == nil {
		return nil, fmt.Errorf("the key %q that signed it is not in the key list", sr.KeyID)
	}
	sig, err := base64.RawURLEncoding.DecodeString(sr.Signature)
	if err != nil {
		return nil, errors.New("the signature is not base64url")
	}
	fields, c, err := canonical(sr.Receipt)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(pub, c, sig) {
		return nil, errors.New("the signature does not match the receipt: it was changed, or signed by another key")
	}
	if textFile != "" {
		text, err := os.ReadFile(textFile)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(text)
		if fields["text_sha256"] != hex.EncodeToString(sum[:]) {
			return nil, fmt.Errorf("the text's SHA-256 is %x, the receipt says %v", sum, fields["text_sha256"])
		}
	}
	return fields, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := noDuplicateNames(b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// noDuplicateNames refuses JSON in which an object, at any depth, has a member name twice.
// RFC 8785 accepts no such input, and readers disagree on it: with "credits":500 before the
// signed "credits":1, one that keeps the last value checks the signature while one that keeps
// the first reads 500. Names are compared as decoded, so "cr\u0065dits" is "credits".
func noDuplicateNames(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return checkNames(d)
}

// checkNames reads one JSON value from d, refusing a member name twice in any of its objects.
func checkNames(d *json.Decoder) error {
	t, err := d.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	delim, ok := t.(json.Delim)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for d.More() {
		if delim == '{' {
			t, err := d.Token()
			if err != nil {
				return fmt.Errorf("not JSON: %w", err)
			}
			name, _ := t.(string)
			if seen[name] {
				return fmt.Errorf("the member %q appears twice in one object, which RFC 8785 does not accept: readers would disagree on its value", name)
			}
			seen[name] = true
		}
		if err := checkNames(d); err != nil {
			return err
		}
	}
	if _, err := d.Token(); err != nil { // the closing bracket
		return fmt.Errorf("not JSON: %w", err)
	}
	return nil
}

// canonical returns the receipt's members and its RFC 8785 canonical form. Member names are
// ASCII, so sorting bytes sorts them as RFC 8785 asks (by UTF-16 code units).
func canonical(raw []byte) (map[string]any, []byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var fields map[string]any
	if err := d.Decode(&fields); err != nil {
		return nil, nil, fmt.Errorf("the receipt is not a JSON object: %w", err)
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		switch v := fields[k].(type) {
		case string:
			writeString(&b, v)
		case json.Number:
			n, err := strconv.ParseInt(v.String(), 10, 64)
			if err != nil || n > 1<<53 || n < -(1<<53) {
				return nil, nil, fmt.Errorf("%s: %s is not a whole number a receipt can hold", k, v)
			}
			b.WriteString(strconv.FormatInt(n, 10))
		default:
			return nil, nil, fmt.Errorf("%s: a receipt holds only strings and whole numbers", k)
		}
	}
	b.WriteByte('}')
	return fields, b.Bytes(), nil
}

// writeString writes s as JSON.stringify does: only '"', '\\' and control characters escaped.
func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
