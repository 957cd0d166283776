// Package cfarg reads the single arguments of Caddyfile subdirectives the same way for every
// module of the plugin, with errors that name the subdirective.
package cfarg

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// String reads exactly one argument.
func String(d *caddyfile.Dispenser, dst *string) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// Int reads one whole number >= 0.
func Int(d *caddyfile.Dispenser, dst *int) error {
	name := d.Val()
	var s string
	if err := String(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return d.Errf("%s: %q is not a whole number >= 0", name, s)
	}
	*dst = n
	return nil
}

// Float reads one number.
func Float(d *caddyfile.Dispenser, dst **float64) error {
	name := d.Val()
	var s string
	if err := String(d, &s); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return d.Errf("%s: %q is not a number", name, s)
	}
	*dst = &f
	return nil
}

// Duration reads one duration >= 0 (Caddy's syntax: 90s, 5m, 1d).
func Duration(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	name := d.Val()
	var s string
	if err := String(d, &s); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return d.Errf("%s: %q is not a duration: %v", name, s, err)
	}
	if dur < 0 {
		return d.Errf("%s: must not be negative", name)
	}
	*dst = caddy.Duration(dur)
	return nil
}

// Block reads a module's block, `<name> { ... }` with no arguments after the name, calling
// setting for each subdirective with d on its name. A subdirective given twice is refused as
// "<where>: <name> specified more than once"; setting refuses the ones it does not know.
func Block(d *caddyfile.Dispenser, where string, setting func(name string) error) error {
	d.Next() // the module's name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] {
			return d.Errf("%s: %s specified more than once", where, name)
		}
		seen[name] = true
		if err := setting(name); err != nil {
			return err
		}
	}
	return nil
}
