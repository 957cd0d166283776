//go:build !unix

package caddymodule

import "errors"

// diskSpace is not available on this system: the disk gauges are not exported.
func diskSpace(string) (free, total int64, err error) {
	return 0, 0, errors.New("statfs is not available")
}
