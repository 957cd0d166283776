package badgerledger

import (
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// A process killed between Badger creating a write-ahead log (.mem) or value-log (.vlog) file and
// sizing it leaves that file empty, and Badger v4.9 then refuses to open the directory:
//
//	During db.vlog.open err: Open existing file: ".../000026.vlog" err: Create a new file
//
// (dgraph-io/badger#2207; the fix, #2331, is not released). TestCrash hit it after a SIGKILL
// during Open. An empty log file holds no entry, so removing it loses nothing: no value pointer
// can point into it and no write-ahead record is in it. removeEmptyLogs does that before Open,
// under the same directory lock Badger takes, so it never touches the files of a process that
// has the ledger open (see repair_unix.go).

// emptyLogs lists dir's zero-length .mem and .vlog files.
func emptyLogs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var empty []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		if info.Size() == 0 {
			empty = append(empty, filepath.Join(dir, name))
		}
	}
	return empty, nil
}

// logsToReplay lists dir's write-ahead logs (.mem files, by name): Badger writes its memtable out
// as a table and removes its log on Close, so a log is left only by a crash (or a Close that
// could not write, on a full disk), and the next open must replay it.
func logsToReplay(dir string) []string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.mem")) // its only error is a bad pattern
	for i, l := range logs {
		logs[i] = filepath.Base(l)
	}
	return logs
}

// removeEmptyLogs removes dir's empty log files. The caller holds the directory lock (lockDir)
// where flock exists; elsewhere it takes none and leaves the files (see withDirLock).
func removeEmptyLogs(dir string, log *zap.Logger, locked bool) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	run := withDirLock
	if locked {
		run = func(_ string, fn func() error) error { return fn() }
	}
	return run(dir, func() error {
		empty, err := emptyLogs(dir)
		if err != nil {
			return err
		}
		for _, path := range empty {
			if err := os.Remove(path); err != nil {
				return err
			}
			log.Warn("removed an empty log file left by a crash while it was being created",
				zap.String("file", path))
		}
		if len(empty) > 0 {
			return syncDir(dir)
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
