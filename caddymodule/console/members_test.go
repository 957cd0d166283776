package console

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-textgen/textgen/ledger"
)

// TestConsoleMembers: an organisation's account page lists its members and invitations (e-mail,
// role, monthly cap, what each used this month and last month, pending), read-only; a personal
// account's page has no Members card.
func TestConsoleMembers(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, eng.open(t))
			// The console's clock a month after the ledger's: what the ledger counts this
			// month is the page's last month.
			n := time.Now().UTC()
			at := time.Date(n.Year(), n.Month()+1, 1, 9, 0, 0, 0, time.UTC)
			setClock(t, &at)
			mk := func(email string) ledger.Account {
				a, err := e.store.CreateAccount(bg, email)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			org, bob, carol := mk("org@example.com"), mk("bob@example.com"), mk("carol@example.com")
			if _, err := e.store.MakeOrganisation(bg, org.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.AddMember(bg, org.ID, bob.ID, ledger.RoleAdmin, false); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.AddMember(bg, org.ID, carol.ID, ledger.RoleMember, true); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.SetMemberCap(bg, org.ID, bob.ID, 7); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Grant(bg, ledger.GrantRequest{AccountID: org.ID, Mode: ledger.Live, Kind: ledger.KindGrant, Credits: 5}); err != nil {
				t.Fatal(err)
			}
			_, k, err := e.store.CreateMemberKey(bg, org.ID, bob.ID, ledger.Live, "bob's", time.Time{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Hold(bg, ledger.HoldRequest{AccountID: org.ID, Mode: ledger.Live, RequestID: "r1", KeyID: k.ID}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Settle(bg, org.ID, "r1"); err != nil {
				t.Fatal(err)
			}

			en := e.enroll("vera@example.com", ledger.OperatorViewer)
			viewer := e.client()
			expectStatus(t, "the viewer logs in", viewer.login("vera@example.com", en.Password, en.RecoveryCodes[0]), http.StatusSeeOther)
			r := viewer.get("/console/accounts/" + org.ID)
			expectStatus(t, "the organisation's page", r, http.StatusOK)
			rows := memberRows(r.body)
			want := []string{
				"org@example.com|owner|none|0|0|member",
				"bob@example.com|admin|7|1|1|member",
				"carol@example.com|member|none|0|0|invited, not accepted",
			}
			mustContain(t, "the Members card", r.body, `<th scope="col">Used in `+n.Format("2006-01")+`</th>`)
			if strings.Join(rows, "\n") != strings.Join(want, "\n") {
				t.Fatalf("the Members card:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
			}
			if strings.Contains(r.body, `/members`) {
				t.Fatal("the Members card has a form: it is read-only")
			}
			r = viewer.get("/console/accounts/" + bob.ID)
			expectStatus(t, "a personal account's page", r, http.StatusOK)
			if strings.Contains(r.body, "<h2 id=\"members-title\">") {
				t.Fatalf("a personal account's page has a Members card:\n%s", r.body)
			}
		})
	}
}

var (
	membersCardRe = regexp.MustCompile(`(?s)id="members-title">.*?<tbody>(.*?)</tbody>`)
	rowRe         = regexp.MustCompile(`(?s)<tr>(.*?)</tr>`)
	cellRe        = regexp.MustCompile(`(?s)<td>(.*?)</td>`)
	tagRe         = regexp.MustCompile(`<[^>]+>`)
)

// memberRows are the Members card's rows, their cells' text joined by "|".
func memberRows(body string) []string {
	m := membersCardRe.FindStringSubmatch(body)
	if m == nil {
		return nil
	}
	var rows []string
	for _, row := range rowRe.FindAllStringSubmatch(m[1], -1) {
		var cells []string
		for _, c := range cellRe.FindAllStringSubmatch(row[1], -1) {
			cells = append(cells, strings.TrimSpace(tagRe.ReplaceAllString(c[1], "")))
		}
		rows = append(rows, strings.Join(cells, "|"))
	}
	return rows
}
