package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
)

// GET /textgen/backup: the online backup stream, with its checksum in a trailer.

func (adminAPI) backup(w http.ResponseWriter, r *http.Request, store operatorLedger) error {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="textgen-ledger-%s.backup"`, now().UTC().Format("20060102T150405Z")))
	h.Set("Trailer", backupChecksumTrailer)
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	if err := store.Backup(r.Context(), cw); err != nil {
		if cw.n == 0 {
			h.Del("Content-Disposition")
			h.Del("Trailer")
			return ledgerError(err, "backing up the ledger")
		}
		// The status line is gone: abort the response so that the client sees a broken stream,
		// never a short file that looks complete.
		panic(http.ErrAbortHandler)
	}
	h.Set(backupChecksumTrailer, hex.EncodeToString(sum.Sum(nil)))
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
