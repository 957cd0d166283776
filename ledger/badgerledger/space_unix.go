//go:build unix

package badgerledger

import "golang.org/x/sys/unix"

// fsSpace returns the bytes free for unprivileged writers and the size of dir's file system.
func fsSpace(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
