package console

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/caddy-textgen/textgen/backends"
	"github.com/caddy-textgen/textgen/caddymodule/internal/textgenapp"
	"github.com/caddy-textgen/textgen/ledger"
)

// The Overview's health: one line each for the ledger, the model servers, Redis (the console's
// limits_store) and the mail outbox, with a word an operator can scan (ok, degraded, down,
// not used) and a detail that names no secret (a host's URL is shown without its user,
// password, path or query).

type healthWord string

const (
	healthOK       healthWord = "ok"
	healthDegraded healthWord = "degraded"
	healthDown     healthWord = "down"
	healthNotUsed  healthWord = "not used"
)

type healthLine struct {
	ID     string // the element's id, for tests and links
	Name   string
	Word   healthWord
	Detail string
	Hosts  []hostLine // the model servers' hosts
}

// Class is the line's style: green, amber, red, or grey when not used.
func (l healthLine) Class() string {
	switch l.Word {
	case healthOK:
		return "ok"
	case healthDegraded:
		return "warn"
	case healthDown:
		return "error"
	}
	return "small"
}

type hostLine struct {
	Host    string
	Healthy bool
}

// health reads the four lines; mail is the outbox as ListMail returned it.
func (a *app) health(ctx context.Context, mail []ledger.MailMessage) []healthLine {
	return []healthLine{a.ledgerHealth(ctx), modelServersHealth(), a.redisHealth(ctx), mailHealth(mail)}
}

func (a *app) ledgerHealth(ctx context.Context) healthLine {
	l := healthLine{ID: "health-ledger", Name: "Ledger", Word: healthOK, Detail: "working"}
	if err := a.store.Health(ctx); err != nil {
		l.Word, l.Detail = healthDown, err.Error()
	}
	return l
}

// modelServersHealth is every host of every set of model servers this process has open, as
// their backends' periodic health checks last found them (what /api/v1/ready and the
// caddy_textgen_model_hosts metric report).
func modelServersHealth() healthLine {
	var hosts []backends.HostStatus
	for _, s := range textgenapp.OpenServers() {
		hosts = append(hosts, s.Hosts()...)
	}
	return hostsHealth(hosts)
}

// hostsHealth is the model servers' line of these hosts: ok when all are healthy, down when
// none is, degraded between, not used without any.
func hostsHealth(hosts []backends.HostStatus) healthLine {
	l := healthLine{ID: "health-models", Name: "Model servers"}
	healthy := 0
	for _, hs := range hosts {
		l.Hosts = append(l.Hosts, hostLine{Host: hostName(hs.URL), Healthy: hs.Healthy})
		if hs.Healthy {
			healthy++
		}
	}
	switch {
	case len(hosts) == 0:
		l.Word, l.Detail = healthNotUsed, "no model server is open in this process"
		return l
	case healthy == len(hosts):
		l.Word = healthOK
	case healthy == 0:
		l.Word = healthDown
	default:
		l.Word = healthDegraded
	}
	l.Detail = fmt.Sprintf("%d of %d hosts healthy", healthy, len(hosts))
	return l
}

// hostName is a host's scheme and address, without a user, password, path or query.
func hostName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a host whose URL does not parse)"
	}
	return u.Scheme + "://" + u.Host
}

// redisHealth is the console's limits_store: down while the shared store has fallen back to
// memory or Redis does not answer a ping now.
func (a *app) redisHealth(ctx context.Context) healthLine {
	l := healthLine{ID: "health-redis", Name: "Redis (log-in throttles)"}
	if a.limits == nil {
		l.Word, l.Detail = healthNotUsed, "the throttles are counted in this instance's memory"
		return l
	}
	if !a.limits.Up() || a.limits.Ping(ctx) != nil {
		l.Word, l.Detail = healthDown, "not answering: the throttles are counted in this instance's memory until it does"
		return l
	}
	l.Word, l.Detail = healthOK, "answering"
	return l
}

// outboxReadLimit is the most queued messages the Overview reads (ListMail's most).
const outboxReadLimit = 1000

// mailHealth is the outbox: how many messages wait, the oldest's age, and how many failed
// their last attempt. Degraded when one failed, or when the oldest has waited over
// mailStaleAfter.
func mailHealth(mail []ledger.MailMessage) healthLine {
	l := healthLine{ID: "health-mail", Name: "Mail", Word: healthOK}
	if len(mail) == 0 {
		l.Detail = "the outbox is empty"
		return l
	}
	failed := 0
	oldest := mail[0].Created
	for _, m := range mail {
		if m.LastError != "" {
			failed++
		}
		if m.Created.Before(oldest) {
			oldest = m.Created
		}
	}
	age := max(now().Sub(oldest), 0).Truncate(time.Second)
	if failed > 0 || age > mailStaleAfter {
		l.Word = healthDegraded
	}
	queued := fmt.Sprint(len(mail))
	if len(mail) >= outboxReadLimit {
		queued = "at least " + queued
	}
	l.Detail = fmt.Sprintf("%s queued, the oldest for %s, %d with a last error", queued, age, failed)
	return l
}

// mailStaleAfter is how long a message may wait before the outbox counts as degraded, failed
// or not: a sender that keeps up sends within seconds.
const mailStaleAfter = 15 * time.Minute
