package idemui_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemui"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// The operations page steers as the CLI does, behind the same confirmation,
// CSRF token, Authorize and log line: alice sets send_receipt's limits,
// pauses notify_new_invoice, and puts the spec's limits back; the page and
// status show who and since when.
func TestOpsPageLimitsAndPauses(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		ctx := context.Background()
		var logs logBuffer
		h, err := idemui.New(db.Ops, idemui.Options{Authorize: onCall, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b := newBrowser(t, mount(t, h))
		if code, body := b.get(""); code != 200 || !strings.Contains(body, "action=limit&amp;job=payment_webhook&amp;effect=send_receipt") {
			t.Fatalf("front page has no Limit link: %d\n%s", code, body)
		}

		form := b.confirmForm("action=limit&job=payment_webhook&effect=send_receipt")
		if code, _ := b.post(url.Values{"action": {"limit"}, "job": {"payment_webhook"}, "effect": {"send_receipt"}, "rate": {"5/s"}}, nil); code != http.StatusForbidden {
			t.Fatalf("a limit without the CSRF token: %d, want 403", code)
		}
		form.Set("rate", "5/s")
		form.Set("concurrency", "2")
		code, body := b.post(form, nil)
		if code != http.StatusOK || !strings.Contains(body, "Set: limits set by hand by alice since") {
			t.Fatalf("limit: %d\n%s", code, body)
		}
		if l := logs.String(); !strings.Contains(l, "idemui: limit") || !strings.Contains(l, "who=alice") || !strings.Contains(l, "rate=5/s") {
			t.Fatalf("limit not logged with who and what:\n%s", l)
		}
		if o, err := db.Ops.Override(ctx, "payment_webhook", "send_receipt"); err != nil || o == nil || o.By != "alice" || o.RateN != 5 || o.Concurrency != 2 {
			t.Fatalf("override after the page's limit: %+v, %v", o, err)
		}
		if _, body := b.get(""); !strings.Contains(body, `data-override="send_receipt"`) || !strings.Contains(body, "rate 5/s (spec: none), concurrency 2 (spec: none)") {
			t.Fatalf("front page does not show the override:\n%s", body)
		}

		form = b.confirmForm("action=pause&job=invoice_sync&effect=notify_new_invoice")
		form.Set("for", "10m")
		if code, body := b.post(form, nil); code != http.StatusOK || !strings.Contains(body, "Paused: no worker calls effect notify_new_invoice") {
			t.Fatalf("pause: %d\n%s", code, body)
		}
		if g, err := db.Ops.Gate(ctx, "invoice_sync", "notify_new_invoice"); err != nil || g == nil || g.State != "paused" || g.By != "alice" {
			t.Fatalf("gate after the page's pause: %+v, %v", g, err)
		}
		if _, body := b.get(""); !strings.Contains(body, `by hand by <span class="by">alice</span>`) {
			t.Fatalf("front page does not show the pause by hand:\n%s", body)
		}

		form = b.confirmForm("action=limit&job=payment_webhook&effect=send_receipt")
		form.Set("reset", "1")
		if code, body := b.post(form, nil); code != http.StatusOK || !strings.Contains(body, "follows the spec&#39;s limits again") {
			t.Fatalf("reset: %d\n%s", code, body)
		}
		if o, err := db.Ops.Override(ctx, "payment_webhook", "send_receipt"); err != nil || o != nil {
			t.Fatalf("override after reset: %+v, %v", o, err)
		}
	})
}
