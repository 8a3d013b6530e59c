package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
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
		acting, err := idemui.New(db.ops, idemui.Options{Authorize: onCall, Log: quiet})
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
	})
}
