package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemui"
)

// The operations page in a real browser: headless Chromium (Debian's
// chromium package), driven over the DevTools protocol by chromedp. It
// skips only when Chromium is missing outside CI; under CI it fails then.
// Each step's screenshot is written to the test's artifact directory
// (go test -artifacts keeps them; docs/operations.md shows one).

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// newChromium starts a headless Chromium of the test's own (a fresh
// profile, no background connections) and returns its context.
func newChromium(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		found, lookErr := exec.LookPath("chromium")
		if lookErr != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI is set and Chromium is missing (%v): install Debian's chromium package (.ci/run does)", err)
			}
			t.Skipf("no Chromium at %s nor on PATH: apt-get install chromium to run the browser tests", chromiumPath)
		}
		path = found
	}
	// A fresh profile; removed after the browser, whose last writes may
	// land as it exits (t.TempDir would fail the test on them).
	profile, err := os.MkdirTemp("", "idemui-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	// Every step is bounded: the whole test gets 2 minutes.
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 2*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
		_ = os.RemoveAll(profile)
	})
	if err := chromedp.Run(browserCtx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return browserCtx
}

// screenshot keeps the page as name.png in the test's artifact directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// browse runs the browser's steps, at most 20 s, failing the test with
// what it was doing.
func browse(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	stepCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(stepCtx, actions...); err != nil {
		var html string
		_ = chromedp.Run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
}

func TestOpsPageInABrowser(t *testing.T) {
	eachUIDB(t, func(t *testing.T, db uiDB) {
		f, j := opsScenario(t, db)
		var logs logBuffer
		acting, err := idemui.New(db.ops, idemui.Options{Authorize: onCall, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		readOnly, err := idemui.New(db.ops, idemui.Options{ReadOnly: true, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/ops/", http.StripPrefix("/ops", acting))
		mux.Handle("/ro/", http.StripPrefix("/ro", readOnly))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		base := srv.URL + "/"
		ctx := newChromium(t)

		// The front page renders the runtime's rows and the chart.
		var health, parked, chartSVG string
		browse(t, ctx, "front page",
			chromedp.Navigate(base+"ops/"),
			chromedp.WaitVisible("#health", chromedp.ByQuery),
			chromedp.Text("#health", &health, chromedp.ByQuery),
			chromedp.Text(`tr[data-effect="notify_new_invoice"] td.parked`, &parked, chromedp.ByQuery),
			chromedp.OuterHTML("#chart", &chartSVG, chromedp.ByQuery),
		)
		if health != "unhealthy" || strings.TrimSpace(parked) != "1" || !strings.Contains(chartSVG, "#2e9b57") || !strings.Contains(chartSVG, "#d64541") {
			t.Fatalf("front page: health %q, parked %q, chart %s", health, parked, chartSVG)
		}
		screenshot(t, ctx, "overview")

		// From the parked list to the retry: the confirmation shows the
		// payload it will resend; the button performs it.
		var payload, changes string
		browse(t, ctx, "parked page",
			chromedp.Navigate(base+"ops/parked"),
			chromedp.WaitVisible("#parked-effects", chromedp.ByQuery),
		)
		screenshot(t, ctx, "parked")
		browse(t, ctx, "retry from the page",
			chromedp.Click(`#parked-effects a.button[href*="inv-1"]`, chromedp.ByQuery),
			chromedp.WaitVisible("#confirm", chromedp.ByQuery),
			chromedp.Text("pre.payload", &payload, chromedp.ByQuery),
		)
		if !strings.Contains(payload, `"inv-1"`) {
			t.Fatalf("the confirmation shows payload %q, want inv-1's", payload)
		}
		screenshot(t, ctx, "confirm")
		if e := ledgerEntry(t, db.store, parkedKey); e.State != idem.StateParked {
			t.Fatalf("the confirmation page changed the row: %+v", e)
		}
		browse(t, ctx, "confirm the retry",
			chromedp.Click("#confirm", chromedp.ByQuery),
			chromedp.WaitVisible("#done", chromedp.ByQuery),
			chromedp.Text("#changes", &changes, chromedp.ByQuery),
		)
		if !strings.Contains(changes, parkedKey) {
			t.Fatalf("the done page lists %q", changes)
		}
		screenshot(t, ctx, "retried")
		f.clk.advance(time.Minute)
		runJob(t, j)
		runJob(t, j)
		if calls := f.mail.calls[parkedKey]; calls != 2 {
			t.Fatalf("provider calls of %s: %d, want the bounce and exactly one after the retry", parkedKey, calls)
		}

		// send_receipt's spec redacts its payload and result: a payment's
		// key page serves neither, in any form.
		hook := newHook(t, db.store, f, newReceipts())
		secret := billing.Payment{EventID: "evt_redact", InvoiceID: "inv-card-4242", AmountCents: 4242, PaidAt: f.base}
		if _, err := hook.Process(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		var keyPage string
		browse(t, ctx, "a redacted effect's key page",
			chromedp.Navigate(base+"ro/key?k="+url.QueryEscape(billing.SendReceiptKey(secret))),
			chromedp.WaitVisible("i.redacted", chromedp.ByQuery),
			chromedp.OuterHTML("html", &keyPage, chromedp.ByQuery),
		)
		for _, leak := range []string{"inv-card-4242", "amount_cents", "rcpt-"} {
			if strings.Contains(keyPage, leak) {
				t.Fatalf("the redacted effect's page holds %q:\n%s", leak, keyPage)
			}
		}
		if strings.Count(keyPage, "[redacted]") != 2 {
			t.Fatalf("the redacted effect's page shows [redacted] %d times, want its payload and result:\n%s", strings.Count(keyPage, "[redacted]"), keyPage)
		}
		screenshot(t, ctx, "redacted")

		// The authorization hook refuses this forget: the page says so and
		// the row stays.
		var refusal string
		browse(t, ctx, "unauthorized forget",
			chromedp.Navigate(base+"ops/confirm?action=forget&key="+url.QueryEscape(doneKey)),
			chromedp.WaitVisible("#confirm", chromedp.ByQuery),
			chromedp.Click("#confirm", chromedp.ByQuery),
			chromedp.WaitVisible(".refused", chromedp.ByQuery),
			chromedp.Text(".refused", &refusal, chromedp.ByQuery),
		)
		if !strings.Contains(refusal, "only the incident lead may forget keys") {
			t.Fatalf("unauthorized forget: %q", refusal)
		}
		screenshot(t, ctx, "unauthorized")
		if e := ledgerEntry(t, db.store, doneKey); e.State != idem.StateDone {
			t.Fatalf("a refused forget changed the row: %+v", e)
		}

		// A read-only handler offers no button, and refuses a form posted
		// to it anyway.
		var buttons int
		browse(t, ctx, "read-only confirmation",
			chromedp.Navigate(base+"ro/key?k="+url.QueryEscape(leasedKey)),
			chromedp.WaitVisible("table.effect", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll("a.button, button#confirm").length`, &buttons),
		)
		if buttons != 0 {
			t.Fatalf("the read-only page shows %d action buttons", buttons)
		}
		var readOnlyRefusal string
		browse(t, ctx, "post to a read-only handler",
			chromedp.Evaluate(`(() => {
				const f = document.createElement("form");
				f.method = "post"; f.action = "act";
				for (const [k, v] of [["action", "forget"], ["key", "`+leasedKey+`"], ["csrf", "x"]]) {
					const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
				}
				document.body.appendChild(f); f.submit(); return true;
			})()`, nil),
			chromedp.WaitVisible(".refused", chromedp.ByQuery),
			chromedp.Text(".refused", &readOnlyRefusal, chromedp.ByQuery),
		)
		if !strings.Contains(readOnlyRefusal, "read-only") {
			t.Fatalf("read-only post: %q", readOnlyRefusal)
		}
		screenshot(t, ctx, "read-only")
		if e := ledgerEntry(t, db.store, leasedKey); e.State != idem.StatePending || e.LeaseOwner != "worker-7" {
			t.Fatalf("a read-only handler changed the row: %+v", e)
		}

		// The mail provider pauses its whole effect for an hour
		// (idem.PauseEffect): the front page shows the pause beside the
		// effect, until when and the provider's answer; the read-only page
		// offers no lift, the acting one lifts it from a confirmation.
		pauseMail(t, db, f)
		until := f.clk.Now().Add(time.Hour).UTC().Format(time.RFC3339) // as the page shows times
		var roGate, roHTML string
		browse(t, ctx, "a paused effect, read-only",
			chromedp.Navigate(base+"ro/"),
			chromedp.WaitVisible(`tr.gate[data-gate="notify_new_invoice"]`, chromedp.ByQuery),
			chromedp.Text(`tr.gate[data-gate="notify_new_invoice"]`, &roGate, chromedp.ByQuery),
			chromedp.OuterHTML("main", &roHTML, chromedp.ByQuery),
		)
		for _, want := range []string{"paused", "until " + until, mailThrottled} {
			if !strings.Contains(roGate, want) {
				t.Fatalf("the paused effect's row shows %q, want %q in it", roGate, want)
			}
		}
		if strings.Contains(roHTML, "action=lift") {
			t.Fatalf("the read-only page offers a lift:\n%s", roHTML)
		}
		screenshot(t, ctx, "paused")
		var gateUntil, lifted string
		browse(t, ctx, "lift the pause from the page",
			chromedp.Navigate(base+"ops/"),
			chromedp.Click(`tr.gate[data-gate="notify_new_invoice"] a.button`, chromedp.ByQuery),
			chromedp.WaitVisible("#confirm", chromedp.ByQuery),
			chromedp.Text("#gate td.until", &gateUntil, chromedp.ByQuery),
		)
		if gateUntil != until {
			t.Fatalf("the lift's confirmation shows the pause until %q, want %q", gateUntil, until)
		}
		if g, err := db.ops.Gate(t.Context(), "invoice_sync", "notify_new_invoice"); err != nil || g == nil {
			t.Fatalf("the lift's confirmation page lifted the gate: %+v, %v", g, err)
		}
		screenshot(t, ctx, "lift")
		browse(t, ctx, "confirm the lift",
			chromedp.Click("#confirm", chromedp.ByQuery),
			chromedp.WaitVisible("#lifted", chromedp.ByQuery),
			chromedp.Text("#lifted", &lifted, chromedp.ByQuery),
		)
		if !strings.HasPrefix(lifted, "Lifted") {
			t.Fatalf("the lift's done page says %q", lifted)
		}
		if g, err := db.ops.Gate(t.Context(), "invoice_sync", "notify_new_invoice"); err != nil || g != nil {
			t.Fatalf("after the lift the gate is %+v, %v; want none", g, err)
		}
		if !regexp.MustCompile(`msg="idemui: lift: .*who=alice`).MatchString(logs.String()) {
			t.Fatalf("the lift is not logged with who did it:\n%s", logs.String())
		}
		var gates int
		browse(t, ctx, "the front page after the lift",
			chromedp.Navigate(base+"ops/"),
			chromedp.WaitVisible("#health", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll("tr.gate").length`, &gates),
		)
		if gates != 0 {
			t.Fatalf("the front page shows %d gates after the lift", gates)
		}
	})
}

// mailThrottled is the mail provider's answer when it pauses its effect.
const mailThrottled = "429 the mail account is throttled"

// pauseMail runs invoice_sync once over a new invoice with a mail
// provider that pauses its whole effect for an hour (idem.PauseEffect),
// on the fixture's clock: the effect is paused until an hour on, the
// invoice's notice waiting for it.
func pauseMail(t *testing.T, db uiDB, f *fixture) {
	t.Helper()
	f.invoice("inv-4", 400, f.clk.Now().Add(-time.Second))
	calls := 0
	notify := billing.NotifyNewInvoiceFunc(func(ctx context.Context, key string, inv billing.Invoice) error {
		calls++
		return idem.PauseEffect(time.Hour, errors.New(mailThrottled))
	})
	gated := idemtest.WithJobEdit(func(j *idemrt.Job[billing.Invoice]) {
		j.Effects[0].Circuit = idemrt.Circuit{Failures: 5, CoolDown: time.Minute} // a gate (the effect has no limits in the spec), for the pause
	})
	j, err := billing.NewInvoiceSync(db.store, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: notify},
		idem.WithClock(f.clk.Now), idemtest.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)),
		idem.WithEffectConcurrency(1), gated)
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := j.Run(context.Background())
	if calls != 1 || rep.EffectsParked != 0 {
		t.Fatalf("the pausing run: %s after %d calls; want one call, nothing parked", rep, calls)
	}
}
