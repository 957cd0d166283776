package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/caddymodule/internal/ratelimit"
	"github.com/caddy-textgen/textgen/caddymodule/internal/sealing"
	"github.com/caddy-textgen/textgen/caddymodule/internal/webarea"
	"github.com/caddy-textgen/textgen/ledger"
)

//go:embed templates/*.html templates/style.css
var templateFS embed.FS

// now is the console's clock (sessions' idle time, TOTP codes); tests move it.
var now = time.Now

type appConfig struct {
	store             consoleLedger
	sealer            *sealing.Sealer
	limits            *ratelimit.Shared
	limitsName        string
	logger            *zap.Logger
	prefix            string
	sessionLifetime   time.Duration
	idleTimeout       time.Duration
	cookieName        string
	supportGrantLimit int64
	siteName          string
}

// app is the console of one config, built when the ledger is open.
type app struct {
	appConfig
	mux    *http.ServeMux
	pages  map[string]*template.Template
	origin *http.CrossOriginProtection
	// Log-in throttles: failed log-ins per operator e-mail and client address, and per client
	// address over any e-mail (as My Account's, tighter: an operator may do more).
	failByEmailAddr, failByAddr *ratelimit.Buckets
}

var (
	// loginLimitPerEmailAddress: 5 failed log-ins of one e-mail from one address, then one
	// every 15 minutes.
	loginLimitPerEmailAddress = ratelimit.Limit{Requests: 1, Window: 15 * time.Minute, Burst: 5}
	// loginLimitPerAddress: 20 failed log-ins from one address, over any e-mails, per 15
	// minutes.
	loginLimitPerAddress = ratelimit.Limit{Requests: 20, Window: 15 * time.Minute, Burst: 20}
)

const throttleEntries = 100_000

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"eur": func(cents int64) string {
		sign := ""
		if cents < 0 {
			sign, cents = "-", -cents
		}
		return fmt.Sprintf("%s%d.%02d EUR", sign, cents/100, cents%100)
	},
}

func newApp(c appConfig) *app {
	a := &app{
		appConfig:       c,
		origin:          http.NewCrossOriginProtection(),
		failByEmailAddr: ratelimit.NewShared(c.limits, c.limitsName+"|login-email-address", loginLimitPerEmailAddress, throttleEntries),
		failByAddr:      ratelimit.NewShared(c.limits, c.limitsName+"|login-address", loginLimitPerAddress, throttleEntries),
		pages:           map[string]*template.Template{},
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	for _, p := range []string{"login", "overview", "accounts", "account", "audit", "payments", "mail", "codes", "code", "error"} {
		a.pages[p] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+p+".html"))
	}
	a.routes()
	return a
}

func (a *app) routes() {
	m := http.NewServeMux()
	p := a.prefix
	m.HandleFunc("GET "+p+"/style.css", a.serveCSS)
	m.HandleFunc("GET "+p+"/login", a.loginPage)
	m.HandleFunc("POST "+p+"/login", a.login)
	m.HandleFunc("POST "+p+"/logout", a.authedPost(actLogout, a.logout))
	m.HandleFunc("GET "+p+"/{$}", a.authed(a.overview))
	m.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, p+"/", http.StatusSeeOther) })
	m.HandleFunc("GET "+p+"/accounts", a.authed(a.accounts))
	m.HandleFunc("POST "+p+"/accounts", a.authedPost(actSearch, a.searchAccounts))
	m.HandleFunc("GET "+p+"/accounts/{id}", a.authed(a.account))
	m.HandleFunc("GET "+p+"/audit", a.authed(a.audit))
	m.HandleFunc("GET "+p+"/payments", a.authed(a.payments))
	m.HandleFunc("GET "+p+"/exports/{file}", a.authed(a.export))
	m.HandleFunc("GET "+p+"/mail", a.authed(a.mail))
	m.HandleFunc("POST "+p+"/mail/{id}/drop", a.authedPost(actDrop, a.dropMail))
	m.HandleFunc("GET "+p+"/codes", a.authed(a.codes)) // codes.go
	m.HandleFunc("GET "+p+"/codes/{id}", a.authed(a.code))
	m.HandleFunc("POST "+p+"/codes", a.authedPost(actCodeCreate, a.createCode))
	m.HandleFunc("POST "+p+"/codes/{id}/disable", a.authedPost(actCodeDisable, a.disableCode))
	for action := range actionRoles {
		if action == actLogout || action == actDrop || action == actSearch {
			continue
		}
		m.HandleFunc("POST "+p+"/accounts/{id}/"+string(action), a.authedPost(action, a.act))
	}
	m.HandleFunc(p+"/", func(w http.ResponseWriter, r *http.Request) {
		a.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "There is no page at this address.")
	})
	a.mux = m
}

// ServeHTTP serves one request of the console.
func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// No script at all.
	webarea.SetPageHeaders(w.Header(), false, "'self'")
	a.mux.ServeHTTP(w, r)
}

func (a *app) serveCSS(w http.ResponseWriter, r *http.Request) {
	css, _ := templateFS.ReadFile("templates/style.css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(css)
}

// page is what every template gets.
type page struct {
	Title    string
	Site     string
	Prefix   string
	Operator *ledger.Operator
	CSRF     string
	Nav      string
	Flash    string
	Error    string
	Data     any
}

func (a *app) render(w http.ResponseWriter, r *http.Request, status int, name string, sc *sessionCtx, p page) {
	p.Site, p.Prefix = a.siteName, a.prefix
	if sc != nil {
		p.Operator, p.CSRF = &sc.op, sc.sess.CSRFToken
	}
	var buf bytes.Buffer
	if err := a.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		a.logger.Error("rendering a console page", zap.String("page", name), zap.Error(err))
		http.Error(w, "Internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (a *app) errorPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, title, msg string) {
	a.render(w, r, status, "error", sc, page{Title: title, Error: msg})
}

func (a *app) internalError(w http.ResponseWriter, r *http.Request, sc *sessionCtx, what string, err error) {
	a.logger.Error("console: "+what, zap.String("path", r.URL.Path), zap.Error(err))
	a.errorPage(w, r, sc, http.StatusInternalServerError, "Something went wrong",
		"The server could not "+strings.TrimPrefix(what, "could not ")+". Try again; the log says why.")
}
