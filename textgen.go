// Package textgen is the caddy-textgen plugin: importing it (as xcaddy does with
// "xcaddy build --with github.com/caddy-textgen/textgen") registers its Caddy modules,
// directives and commands. The code lives in caddymodule/, ledger/ and backends/.
package textgen

import (
	// Registers http.handlers.textgen and the textgen app.
	_ "github.com/caddy-textgen/textgen/caddymodule"
	// Registers http.handlers.textgen_account, the My Account area.
	_ "github.com/caddy-textgen/textgen/caddymodule/account"
	// Registers http.handlers.textgen_console, the operator's web console.
	_ "github.com/caddy-textgen/textgen/caddymodule/console"
	// Registers admin.api.textgen and the caddy textgen commands, the operator's interface.
	_ "github.com/caddy-textgen/textgen/caddymodule/operator"
)
