package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyReceiptExample: the accountant's program of docs/clients/verify-receipt, built as
// the docs say, checks a receipt fetched from the real server with the key list of the
// well-known path and the text as received, and refuses it with a changed field, a member
// twice or another text.
func TestVerifyReceiptExample(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "verify-receipt")
	if out, err := exec.Command("go", "build", "-o", bin, "../docs/clients/verify-receipt").CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	e := newEnv(t, envOptions{ollama: modelServer(t), site: receiptsSite, matcher: "@textgen",
		extra: "retention 1h\n\t\tretention_key " + testRetentionKey})
	_, key := e.account(2)
	resp, err := e.post(context.Background(), key, genBody("summarizer", "A text for the accountant.", "en", ""))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := checkStreamed(t, resp, "1")
	rid := resp.Header.Get("X-Request-Id")
	_, keys := e.getText("", receiptKeysPath)
	_, receipt := e.getText(key, generationsPath+rid+signedReceiptSuffix)
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kf, rf, tf := write("keys.json", keys), write("receipt.json", receipt), write("answer.txt", text)
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run("-keys", kf, "-text", tf, rf); err != nil || !strings.HasSuffix(out, "valid\n") || !strings.Contains(out, "request_id: "+rid) {
		t.Fatalf("a true receipt: %v\n%s", err, out)
	}
	if !strings.Contains(receipt, `"credits":1`) {
		t.Fatalf("the receipt has no credits field to change: %s", receipt)
	}
	tampered := write("tampered.json", strings.Replace(receipt, `"credits":1`, `"credits":0`, 1))
	if out, err := run("-keys", kf, tampered); err == nil || !strings.Contains(out, "NOT VALID") {
		t.Fatalf("a tampered receipt: %v\n%s", err, out)
	}
	// A member twice, whichever copy the signature holds for, however its name is written, at
	// any depth of the file: RFC 8785 accepts no such input, and a reader that keeps the first
	// value would read 500 credits of a receipt signed for 1.
	for i, dup := range []string{
		strings.Replace(receipt, `"credits":1`, `"credits":500,"credits":1`, 1),
		strings.Replace(receipt, `"credits":1`, `"credits":1,"credits":500`, 1),
		strings.Replace(receipt, `"credits":1`, `"cr\u0065dits":500,"credits":1`, 1),
		strings.Replace(receipt, `"signature":`, `"key_id":"rk_other","signature":`, 1),
	} {
		if dup == receipt {
			t.Fatalf("variant %d changed nothing: %s", i, receipt)
		}
		f := write(fmt.Sprintf("dup%d.json", i), dup)
		if out, err := run("-keys", kf, f); err == nil || !strings.Contains(out, "NOT VALID") || !strings.Contains(out, "twice") {
			t.Fatalf("a receipt with a member twice (%s): %v\n%s", dup, err, out)
		}
	}
	other := write("other.txt", text+" and a little more")
	if out, err := run("-keys", kf, "-text", other, rf); err == nil || !strings.Contains(out, "NOT VALID") {
		t.Fatalf("another text: %v\n%s", err, out)
	}
}
