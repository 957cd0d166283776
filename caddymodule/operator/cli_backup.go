package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/caddy-textgen/textgen/ledger/badgerledger"
)

// caddy textgen backup (online, through the server) and restore (offline, into a new directory)

// backupResult is what backup prints.
type backupResult struct {
	Output string `json:"output"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func cmdBackup(c *cliContext) error {
	out, err := requireString(c.fl, "output")
	if err != nil {
		return err
	}
	force := c.fl.Bool("force")
	if err := checkBackupTarget(out, force); err != nil {
		return err
	}
	api, err := c.api()
	if err != nil {
		return err
	}
	// Write next to the target and rename at the end, so that an interrupted download never
	// leaves a file that looks like a backup.
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".part-*")
	if err != nil {
		return fmt.Errorf("creating the backup file: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	// The bytes received: the server cannot say beforehand how many it will send.
	p := c.progress()
	defer p.Close()
	p.StartBytes("downloading the backup")
	resp, err := api.request(context.Background(), http.MethodGet, "/textgen/backup", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	p.Set(0, -1)
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sum, p.Counter()), resp.Body)
	if err != nil {
		return fmt.Errorf("downloading the backup: %w (nothing was written to %s)", err, out)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if want := resp.Trailer.Get(backupChecksumTrailer); want == "" {
		return fmt.Errorf("the backup download ended without its checksum: it is incomplete (nothing was written to %s)", out)
	} else if want != got {
		return fmt.Errorf("the backup download is corrupt: sha256 %s, the server sent %s (nothing was written to %s)", got, want, out)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := placeBackup(tmp.Name(), out, force); err != nil {
		return err
	}
	p.Done()
	res := backupResult{Output: out, Bytes: n, SHA256: got}
	return c.printValue(res, func(w io.Writer) {
		fmt.Fprintf(w, "Wrote the ledger backup to %s (%d bytes, sha256 %s).\n", out, n, got)
	})
}

// checkBackupTarget refuses, before anything is downloaded, a directory and, without force, a
// file that exists: an older backup is worth more than a mistyped name.
func checkBackupTarget(out string, force bool) error {
	fi, err := os.Stat(out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("backup file %s: %w", out, err)
	case fi.IsDir():
		return fmt.Errorf("%s is a directory; --output names the backup file to write", out)
	case !force:
		return backupExists(out)
	}
	return nil
}

func backupExists(out string) error {
	return fmt.Errorf("refusing to overwrite %s: the file exists; choose another --output, or add --force to replace it", out)
}

// placeBackup moves the complete download (tmp) to out. Without force it links rather than
// renames: a link never replaces a file, not even one that appeared during the download. The
// caller removes tmp.
func placeBackup(tmp, out string, force bool) error {
	if !force {
		err := os.Link(tmp, out)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, os.ErrExist):
			return backupExists(out)
		}
		// a file system without hard links: check once more, then rename
		if _, err := os.Lstat(out); err == nil {
			return backupExists(out)
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	return nil
}

// restoreResult is what restore prints.
type restoreResult struct {
	Restored bool   `json:"restored"`
	Input    string `json:"input"`
	Ledger   string `json:"ledger"`
	Bytes    int64  `json:"bytes"`
}

func cmdRestore(c *cliContext) error {
	in, err := requireString(c.fl, "input")
	if err != nil {
		return err
	}
	dir, err := requireString(c.fl, "ledger")
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("ledger directory %s: %w", dir, err)
	}
	// Checked here as well as in badgerledger.Restore, to say what to do: a restore never mixes a
	// backup into a ledger, and an empty directory cannot be one a running server holds.
	entries, err := os.ReadDir(abs)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("refusing to restore into %s: the directory is not empty; restore into a new, empty directory with the server stopped, then point the textgen ledger at it", abs)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("ledger directory %s: %w", abs, err)
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("opening the backup: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("opening the backup: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory, not a backup file", in)
	}
	// The bytes of the backup read, of its size; Badger's writes of the last of them follow.
	p := c.progress()
	defer p.Close()
	p.StartBytes("restoring")
	p.Set(0, fi.Size())
	if err := badgerledger.Restore(abs, p.Reader(f)); err != nil {
		return fmt.Errorf("restoring %s into %s: %w", in, abs, err)
	}
	p.Done()
	res := restoreResult{Restored: true, Input: in, Ledger: abs, Bytes: fi.Size()}
	return c.printValue(res, func(w io.Writer) {
		fmt.Fprintf(w, "Restored %s into %s.\nPoint the textgen handler's ledger at this directory, start Caddy, and run 'caddy textgen ledger verify'.\n", in, abs)
	})
}
