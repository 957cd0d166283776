package caddymodule

import (
	"reflect"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zapcore"
)

// Reading the running config's logs, for the access log check at start (accesslog.go). Caddy
// gives a module no accessor for its config's logging section, and it drops each log's raw
// encoder JSON once the encoder is loaded. Its copy of the config's JSON is no way round: Caddy
// stores it only once the new config has started (after this check), and reads it out only
// through its admin API, which a config may turn off. So the config and each log's loaded
// encoder are read through reflection (the encoder is then only used, on a probe entry). Both reads check the types they expect and report false on anything else
// (another Caddy version), and the check at start then leaves the warning to the first request
// that carries X-API-Key.

// configLogs returns the custom logs of ctx's config (the default log among them).
func configLogs(ctx caddy.Context) (map[string]*caddy.CustomLog, bool) {
	v := reflect.ValueOf(&ctx).Elem().FieldByName("cfg")
	if !v.IsValid() || v.Type() != reflect.TypeOf((*caddy.Config)(nil)) || v.IsNil() {
		return nil, false
	}
	cfg := (*caddy.Config)(unsafe.Pointer(v.Pointer()))
	if cfg.Logging == nil {
		return nil, false
	}
	return cfg.Logging.Logs, true
}

// customLogEncoder returns cl's loaded encoder, or nil.
func customLogEncoder(cl *caddy.CustomLog) zapcore.Encoder {
	f := reflect.ValueOf(cl).Elem().FieldByName("BaseLog").FieldByName("encoder")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*zapcore.Encoder)(nil)).Elem() || f.IsNil() {
		return nil
	}
	return *(*zapcore.Encoder)(unsafe.Pointer(f.UnsafeAddr()))
}
