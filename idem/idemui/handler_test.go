package idemui_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemui"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// browser is an HTTP client with cookies, as a browser keeps them.
type browser struct {
	t      *testing.T
	client *http.Client
	base   string
}

func newBrowser(t *testing.T, srv *httptest.Server) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, base: srv.URL + "/ops/"}
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.client.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) post(form url.Values, header http.Header) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+"act", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var tokenField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// confirmForm opens the confirmation page of an action and returns its
// form, as the page's button would post it.
func (b *browser) confirmForm(query string) url.Values {
	b.t.Helper()
	code, body := b.get("confirm?" + query)
	m := tokenField.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		b.t.Fatalf("confirm?%s: %d, no form:\n%s", query, code, body)
	}
	form, _ := url.ParseQuery(query)
	form.Set("csrf", m[1])
	return form
}

// logBuffer collects the handler's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mount serves h under /ops/ as a service would.
func mount(t *testing.T, h http.Handler) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// onCall authorizes every action as alice, except forgets, which it
// refuses: the service's own authorization.
func onCall(_ *http.Request, a idemui.Action) (string, error) {
	if a.Kind == idemui.ActionForget {
		return "", errNotOnCall
	}
	return "alice", nil
}

var errNotOnCall = &notOnCall{}

type notOnCall struct{}

func (*notOnCall) Error() string { return "only the incident lead may forget keys" }

func TestOpsPageShowsAndRetries(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		f, j := billingtest.OpsScenario(t, db)
		var logs logBuffer
		h, err := idemui.New(db.Ops, idemui.Options{Authorize: onCall, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, mount(t, h))

		// The front page: each effect's counts, from the runtime's rows.
		code, body := b.get("")
		effectRow := regexp.MustCompile(`(?s)<tr data-effect="notify_new_invoice">.*?</tr>`).FindString(body)
		cell := func(class string) string {
			m := regexp.MustCompile(`class="n ` + class + `[^"]*">(?:<a[^>]*>)?(\d+)`).FindStringSubmatch(effectRow)
			if m == nil {
				t.Fatalf("no %s cell in %q", class, effectRow)
			}
			return m[1]
		}
		if code != http.StatusOK || cell("owed") != "1" || cell("parked") != "1" || cell("done") != "1" || !strings.Contains(body, `id="health">unhealthy`) {
			t.Fatalf("front page %d, notify_new_invoice row %q", code, effectRow)
		}
		// The chart counts the send that is done (inv-2; inv-3's row was
		// put back under a lease) and the bounce, in the last hours.
		if !strings.Contains(body, `<span class="ok">1 done</span>, <span class="bad">1 failed</span>`) || !strings.Contains(body, "<svg id=\"chart\"") {
			t.Fatalf("front page chart: %s", body)
		}

		// The parked page, searchable by key.
		code, body = b.get("parked?q=" + url.QueryEscape("notify:new-invoice:v2:inv-1"))
		if code != 200 || !strings.Contains(body, billingtest.ParkedKey) {
			t.Fatalf("parked page: %d\n%s", code, body)
		}
		// Its Retry link opens the confirmation of that key.
		link := regexp.MustCompile(`href="(confirm\?action=retry[^"]*inv-1[^"]*)"`).FindStringSubmatch(body)
		if link == nil {
			t.Fatalf("no Retry link on the parked page:\n%s", body)
		}
		if code, body := b.get(strings.ReplaceAll(link[1], "&amp;", "&")); code != 200 || !strings.Contains(body, `name="key" value="`+billingtest.ParkedKey+`"`) {
			t.Fatalf("the Retry link's confirmation: %d\n%s", code, body)
		}
		if code, body := b.get("parked?q=nothing-here"); code != 200 || !strings.Contains(body, `id="none"`) {
			t.Fatalf("parked page, no match: %d\n%s", code, body)
		}
		// A key's history: attempts, last error, the stored payload.
		code, body = b.get("key?k=" + url.QueryEscape(billingtest.ParkedKey))
		if code != 200 || !strings.Contains(body, "mailbox does not exist") || !strings.Contains(body, "inv-1") || !strings.Contains(body, "permanent") ||
			!strings.Contains(body, "<td>notify_new_invoice, version 2 (job version 1)</td>") {
			t.Fatalf("key page: %d\n%s", code, body)
		}
		// A unit's key shows its effects too.
		if code, body := b.get("key?k=" + url.QueryEscape("billing:invoice:inv-2")); code != 200 || !strings.Contains(body, billingtest.DoneKey) {
			t.Fatalf("unit key page: %d\n%s", code, body)
		}
		if code, _ := b.get("key?k=no-such-key"); code != http.StatusNotFound {
			t.Fatalf("unknown key: %d", code)
		}

		// No page writes on GET: the confirmation only shows.
		form := b.confirmForm("action=retry&key=" + url.QueryEscape(billingtest.ParkedKey))
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.ParkedKey); e.State != idem.StateParked {
			t.Fatalf("after the confirmation page: %+v", e)
		}
		// An action without the form's token, or from another site, is refused.
		noToken := url.Values{"action": {"retry"}, "key": {billingtest.ParkedKey}}
		if code, _ := b.post(noToken, nil); code != http.StatusForbidden {
			t.Fatalf("no token: %d", code)
		}
		if code, _ := b.post(form, http.Header{"Sec-Fetch-Site": {"cross-site"}}); code != http.StatusForbidden {
			t.Fatalf("cross-site: %d", code)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.ParkedKey); e.State != idem.StateParked {
			t.Fatalf("a refused action changed the row: %+v", e)
		}

		// The retry: the next run performs the effect once.
		code, body = b.post(form, nil)
		if code != http.StatusOK || !strings.Contains(body, billingtest.ParkedKey) || !strings.Contains(body, "by alice") {
			t.Fatalf("retry: %d\n%s", code, body)
		}
		if !strings.Contains(logs.String(), "who=alice") || !strings.Contains(logs.String(), "changed_key="+billingtest.ParkedKey) {
			t.Fatalf("the retry is not logged with who did it:\n%s", logs.String())
		}
		f.Clock.Advance(time.Minute)
		billingtest.Run(t, j)
		billingtest.Run(t, j)
		if calls := f.Mailer.CallsOf(billingtest.ParkedKey); calls != 2 {
			t.Fatalf("provider calls of %s: %d, want the bounce and one more", billingtest.ParkedKey, calls)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.ParkedKey); e.State != idem.StateDone {
			t.Fatalf("after the retry and a run: %+v", e)
		}
		// Posting the same form again finds nothing parked: refused.
		if code, _ := b.post(form, nil); code != http.StatusConflict {
			t.Fatalf("second retry: %d", code)
		}

		// Authorization: the hook refuses forgets.
		form = b.confirmForm("action=forget&key=" + url.QueryEscape(billingtest.DoneKey))
		if code, body := b.post(form, nil); code != http.StatusForbidden || !strings.Contains(body, "only the incident lead") {
			t.Fatalf("unauthorized forget: %d\n%s", code, body)
		}
		if !strings.Contains(logs.String(), "not authorized") {
			t.Fatalf("the refusal is not logged:\n%s", logs.String())
		}

		// An effect under a live lease: the confirmation says so, and the
		// retry is refused, the row left as it is.
		code, body = b.get("confirm?action=retry&key=" + url.QueryEscape(billingtest.LeasedKey))
		if code != 200 || !strings.Contains(body, "leased by worker worker-7") {
			t.Fatalf("leased confirmation: %d\n%s", code, body)
		}
		form = b.confirmForm("action=retry&key=" + url.QueryEscape(billingtest.LeasedKey))
		if code, body := b.post(form, nil); code != http.StatusConflict || !strings.Contains(body, "worker-7") {
			t.Fatalf("retry of a leased effect: %d\n%s", code, body)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.LeasedKey); e.State != idem.StatePending || e.LeaseOwner != "worker-7" {
			t.Fatalf("leased row after a refused retry: %+v", e)
		}
	})
}

func TestOpsPageReadOnlyAndRedacted(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		if _, err := idemui.New(db.Ops, idemui.Options{}); err == nil {
			t.Fatal("a handler that takes actions without Authorize was made")
		}
		h, err := idemui.New(db.Ops, idemui.Options{ReadOnly: true, Redact: idemui.RedactAll, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, mount(t, h))
		code, body := b.get("key?k=" + url.QueryEscape(billingtest.ParkedKey))
		if code != 200 || strings.Contains(body, "inv-1&#34;") || strings.Contains(body, `"invoice_id"`) || !strings.Contains(body, "redacted") || strings.Contains(body, "Retry…") {
			t.Fatalf("read-only, redacted key page: %d\n%s", code, body)
		}
		code, body = b.get("confirm?action=retry&key=" + url.QueryEscape(billingtest.ParkedKey))
		if code != 200 || tokenField.MatchString(body) || !strings.Contains(body, "read-only") {
			t.Fatalf("read-only confirmation: %d\n%s", code, body)
		}
		// Even a well-formed post is refused.
		if code, _ := b.post(url.Values{"action": {"retry"}, "key": {billingtest.ParkedKey}, "csrf": {"x"}}, nil); code != http.StatusForbidden {
			t.Fatalf("read-only post: %d", code)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.ParkedKey); e.State != idem.StateParked {
			t.Fatalf("a read-only handler changed the row: %+v", e)
		}
	})
}

func TestOpsPageRetriesAJobsParkedWork(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		f, j := billingtest.OpsScenario(t, db)
		var logs logBuffer
		h, err := idemui.New(db.Ops, idemui.Options{Authorize: onCall, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, mount(t, h))
		if code, body := b.get(""); code != 200 || !strings.Contains(body, "Retry the 1 parked of invoice_sync…") || strings.Contains(body, "parked of payment_webhook") {
			t.Fatalf("front page: %d\n%s", code, body)
		}
		form := b.confirmForm("action=retry-parked&job=invoice_sync")
		code, body := b.post(form, nil)
		if code != http.StatusOK || !strings.Contains(body, billingtest.ParkedKey) || strings.Contains(body, billingtest.LeasedKey) {
			t.Fatalf("retry-parked: %d\n%s", code, body)
		}
		if !strings.Contains(logs.String(), "idemui: retry-parked") || !strings.Contains(logs.String(), "who=alice") {
			t.Fatalf("not logged:\n%s", logs.String())
		}
		f.Clock.Advance(time.Minute)
		billingtest.Run(t, j)
		if calls := f.Mailer.CallsOf(billingtest.ParkedKey); calls != 2 {
			t.Fatalf("provider calls of %s: %d, want the bounce and one more", billingtest.ParkedKey, calls)
		}
	})
}

// The front page counts at most Options.CountLimit rows of a job per
// state, so it answers at once on any ledger: past the limit a count
// shows as a lower bound ("1+"), and below it as the number.
func TestOpsPageCountsStopAtTheLimit(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		// A second row beside the parked, the done and the owed one.
		const cols = "job, effect, effect_version, job_version, unit_key, payload, state, attempts, lease_owner, lease_until, last_error, created_at, updated_at, done_at, permanent, parked_reason, next_attempt_at"
		for _, key := range []string{billingtest.ParkedKey, billingtest.DoneKey, billingtest.LeasedKey} {
			copyRow := "INSERT INTO billing_idem_ledger (effect_key, " + cols + ") SELECT effect_key || '-again', " + cols + " FROM billing_idem_ledger WHERE effect_key = '" + key + "'"
			db.Exec(t, copyRow, copyRow)
		}
		cells := func(limit int) string {
			h, err := idemui.New(db.Ops, idemui.Options{ReadOnly: true, CountLimit: limit, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			code, body := newBrowser(t, mount(t, h)).get("")
			if code != http.StatusOK {
				t.Fatalf("front page: %d\n%s", code, body)
			}
			row := regexp.MustCompile(`(?s)<tr data-effect="notify_new_invoice">.*?</tr>`).FindString(body)
			var got []string
			for _, class := range []string{"owed", "parked", "done"} {
				m := regexp.MustCompile(`class="n ` + class + `[^"]*">(?:<a[^>]*>)?(\d+(?:&#43;)?)`).FindStringSubmatch(row) // html/template writes + as &#43;
				if m == nil {
					t.Fatalf("no %s cell in %q", class, row)
				}
				got = append(got, class+" "+strings.ReplaceAll(m[1], "&#43;", "+"))
			}
			if (limit == 1) != strings.Contains(body, `id="counted"`) {
				t.Errorf("limit %d: the note that counts stop at the limit is shown: %v", limit, strings.Contains(body, `id="counted"`))
			}
			if limit == 1 && !strings.Contains(body, "at least 1 parked effect") {
				t.Errorf("limit 1: the problem line does not say the parked count is a lower bound:\n%s", body)
			}
			return strings.Join(got, ", ")
		}
		// Done rows are counted exactly up to twice the limit (per version:
		// the newest and the oldest past it).
		if got, want := cells(1), "owed 1+, parked 1+, done 2"; got != want {
			t.Errorf("limit 1: %s, want %s", got, want)
		}
		if got, want := cells(0), "owed 2, parked 2, done 2"; got != want {
			t.Errorf("default limit: %s, want %s", got, want)
		}
	})
}

// send_receipt's spec redacts its payload and result (redact: [payload,
// result]): a payment's key page, and the idemops rows behind it and
// their JSON, hold "[redacted]" in their place, with no handler option.
func TestOpsPageRedactsWhatTheSpecSays(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		f := billingtest.NewOpsFixture()
		hook := f.Hook(t, db.Store, billingtest.NewReceipts())
		secret := billing.Payment{EventID: "evt_redact", InvoiceID: "inv-card-4242", AmountCents: 4242, PaidAt: f.Base}
		if _, err := hook.Process(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		h, err := idemui.New(db.Ops, idemui.Options{ReadOnly: true, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		key := billing.SendReceiptKey(secret)
		code, body := newBrowser(t, mount(t, h)).get("key?k=" + url.QueryEscape(key))
		if code != http.StatusOK || strings.Count(body, "[redacted]") != 2 {
			t.Fatalf("key page %d, [redacted] %d times, want its payload and result:\n%s", code, strings.Count(body, "[redacted]"), body)
		}
		for _, leak := range []string{"inv-card-4242", "amount_cents", "rcpt-"} {
			if strings.Contains(body, leak) {
				t.Fatalf("the key page holds %q:\n%s", leak, body)
			}
		}
		rows, err := db.Ops.Show(t.Context(), key, "")
		if err != nil || len(rows.Effects) != 1 {
			t.Fatalf("show: %v, %+v", err, rows)
		}
		e := rows.Effects[0]
		if string(e.Payload) != `"[redacted]"` || e.Result != nil || !slices.Equal(e.Redacted, []string{"payload", "result"}) {
			t.Fatalf("show's row: payload %s, result %q, redacted %v", e.Payload, e.Result, e.Redacted)
		}
		// invoice_sync redacts nothing: its payloads are shown.
		billingtest.OpsScenario(t, db)
		if _, body := newBrowser(t, mount(t, h)).get("key?k=" + url.QueryEscape(billingtest.ParkedKey)); !strings.Contains(body, "inv-1") || strings.Contains(body, "[redacted]") {
			t.Fatalf("an effect the spec does not redact:\n%s", body)
		}
	})
}
