package idemui_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemui"
)

// A service mounts the operations page behind its own authentication; the
// page reads the runtime's rows through idemops. Here it is read-only,
// under /ops/, over a database where one receipt is parked.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemui-example-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "billing.db"))
	if err != nil {
		panic(err)
	}
	store := billing.NewSQLiteStore(db)
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	declined := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
		return nil, idem.Permanent(errors.New("402 card declined"))
	})
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: declined}, idem.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	_, _ = hook.Process(ctx, billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: time.Now()})

	ops, err := idemops.New(ctx, db, store.Runtime(), idemops.SQLite, billing.OpsPackage(), quiet)
	if err != nil {
		panic(err)
	}
	defer ops.Close()
	page, err := idemui.New(ops, idemui.Options{ReadOnly: true, Log: quiet})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", page)) // behind the service's authentication
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/ops/")
	fmt.Println("front page:", code, "unhealthy:", strings.Contains(body, `id="health">unhealthy`))
	code, body = get("/ops/key?k=" + url.QueryEscape("receipt:v1:evt_1"))
	fmt.Println("key page:", code, "says declined:", strings.Contains(body, "402 card declined"))
	resp, err := http.PostForm(srv.URL+"/ops/act", url.Values{"action": {"retry"}, "key": {"receipt:v1:evt_1"}})
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("an action on a read-only page:", resp.StatusCode)
	// Output:
	// front page: 200 unhealthy: true
	// key page: 200 says declined: true
	// an action on a read-only page: 403
}
