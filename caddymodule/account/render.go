package account

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-textgen/textgen/ledger"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets/*
var assetFS embed.FS

// pageSet holds one template per page (each the layout plus the page's content) and the
// static assets with a content hash for cache busting.
type pageSet struct {
	pages        map[string]*template.Template
	assets       map[string][]byte
	assetVersion string
}

var funcs = template.FuncMap{
	"euro": formatEuro,
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04")
	},
	"isoTime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"perCredit": func(p Package) string {
		return formatEuro(p.PriceCents / p.Credits)
	},
	"customerStatus": customerStatus,
	"budgetLeft":     budgetLeft,
	"lasts":          lasts,
}

// lasts says how long a package's credits last: whole days, else hours.
func lasts(d caddy.Duration) string {
	t := time.Duration(d)
	if t%(24*time.Hour) == 0 {
		return units(int64(t/(24*time.Hour)), "day")
	}
	return units(int64((t+time.Hour-1)/time.Hour), "hour")
}

// units is n units, in words: "1 day", "365 days".
func units(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// customerStatus says where a refund or dispute stands, in the customer's words (a dispute the
// ledger calls won is one the payment stands in; lost, one the bank gave the money back in).
func customerStatus(r ledger.Reversal) string {
	switch {
	case r.Kind == ledger.ReversalRefund && r.Status == ledger.RefundFailed:
		return "refund failed: nothing was refunded, the credits are yours again"
	case r.Kind == ledger.ReversalRefund:
		return "refunded"
	case r.Status == ledger.DisputeOpen:
		return "dispute open: the credits of this purchase are on hold until it is decided"
	case r.Status == ledger.DisputeWon:
		return "dispute closed: the payment stands, the credits are yours again"
	default:
		return "dispute closed: the payment was returned through your bank, the credits were taken back"
	}
}

// formatEuro writes integer cents as euros: 200 -> "€2.00".
func formatEuro(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s€%d.%02d", sign, cents/100, cents%100)
}

func loadPages() (*pageSet, error) {
	ps := &pageSet{pages: map[string]*template.Template{}, assets: map[string][]byte{}}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("account templates: %w", err)
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("account template %s: %w", f, err)
		}
		ps.pages[name] = t
	}
	h := sha256.New()
	entries, err := fs.ReadDir(assetFS, "assets")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := fs.ReadFile(assetFS, "assets/"+e.Name())
		if err != nil {
			return nil, err
		}
		ps.assets[e.Name()] = b
		h.Write(b)
	}
	ps.assetVersion = hex.EncodeToString(h.Sum(nil)[:6])
	return ps, nil
}

// page is what every template gets.
type page struct {
	Title, Site, Prefix, Assets, Nav string
	Account                          *ledger.Account
	// Acting is the organisation the session acts in (nil: the login's own account), and Role
	// the login's role there (org.go).
	Acting       *ledger.Account
	Role         ledger.Role
	CSRF         string
	Flash, Error string
	Data         any
}

// render writes page name with status. Templates run into a buffer first, so a template error
// becomes a clean 500 rather than half a page.
func (a *app) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t := a.pages.pages[name]
	if t == nil {
		a.logger.Error("no such page template", zap.String("page", name))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	p.Site, p.Prefix, p.Assets = a.siteName, a.prefix, a.pages.assetVersion
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		a.logger.Error("rendering page", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// errorPage shows a short page for an error status; sc may be nil (not logged in).
func (a *app) errorPage(w http.ResponseWriter, r *http.Request, sc *sessionCtx, status int, title, msg string) {
	p := sc.page(title, "")
	p.Data = struct{ Message string }{msg}
	a.render(w, r, status, "error", p)
}

// page starts the data of a page for this session (nil: not logged in).
func (sc *sessionCtx) page(title, nav string) page {
	p := page{Title: title, Nav: nav}
	if sc != nil {
		acct := sc.login
		p.Account, p.CSRF, p.Role = &acct, sc.sess.CSRFToken, sc.role
		if sc.acct.ID != sc.login.ID {
			org := sc.acct
			p.Acting = &org
		}
	}
	return p
}

// serveAsset serves the embedded CSS and script; they may be cached for a long time because
// their URL carries a content hash.
func (a *app) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, ok := a.pages.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Write(b)
}
