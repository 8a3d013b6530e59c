// Package idemui is the operations page of a generated package: an
// http.Handler that shows its jobs and effects, a chart of the effects
// done and failed per minute, the parked work and any key's history, each
// effect's pause or open circuit, and, unless it is read-only, puts parked
// work back (idem.Retry, idem.RetryParked), forgets a key (idem.Forget) or
// lifts an effect's pause or closes its circuit (idem.LiftGate), and
// steers an effect by hand: its rate and concurrency (idem.SetLimits) or a
// pause (idem.PauseByHand), the runtime's one implementation of each.
//
// A service mounts it under its own path and behind its own
// authentication:
//
//	ops, err := idemops.New(ctx, db, store.Runtime(), idemops.Postgres, desc, logger)
//	ui, err := idemui.New(ops, idemui.Options{Authorize: whoIsOnCall})
//	mux.Handle("/ops/", http.StripPrefix("/ops", ui))
//
// Pages are server-rendered HTML (html/template, an inline SVG chart, no
// script) and never write on GET. Every action is a POST from a
// confirmation page that shows what it will put back or remove; it must
// pass cross-origin protection, a CSRF token, and Options.Authorize, and
// it is logged with who did it. `idemgen ui` serves the same handler.
package idemui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The actions a handler performs, each the runtime's recovery.
const (
	ActionRetry       = "retry"        // idem.Retry: put back what is parked under a key
	ActionRetryParked = "retry-parked" // idem.RetryParked: put back every parked effect and unit of a job
	ActionForget      = "forget"       // idem.Forget: forget a key on purpose
	ActionLift        = "lift"         // idem.LiftGate: lift an effect's pause or close its circuit
	ActionLimit       = "limit"        // idem.SetLimits, idem.ResetLimits: an effect's rate and concurrency by hand
	ActionPause       = "pause"        // idem.PauseByHand: pause an effect fleet-wide
)

// Action is what a person asks the handler to do, as Options.Authorize
// sees it before anything is done.
type Action struct {
	Kind   string // one of the Action constants
	Job    string // "" for every job (ActionRetry, ActionForget)
	Key    string // "" for ActionRetryParked, ActionLift, ActionLimit and ActionPause
	Effect string // the effect ActionLift, ActionLimit or ActionPause is about; "" otherwise
	// ActionLimit: the rate (N/s, N/m, N/h) and concurrency to set ("" and
	// 0 keep the spec's), or Reset to go back to the spec's.
	Rate        string
	Concurrency int
	Reset       bool
	// ActionPause: how long the effect stays paused.
	For time.Duration
}

// Options configure a handler.
type Options struct {
	// ReadOnly serves the pages and refuses every action (403).
	ReadOnly bool
	// Authorize is asked before each action, with the request (its
	// session, headers, client certificate: the service's
	// authentication): it returns who acts, which the log records with
	// the action, or an error, which refuses it (403) and is shown. A
	// handler that is not ReadOnly needs one.
	Authorize func(r *http.Request, a Action) (who string, err error)
	// Redact hides the stored payload and result of an effect of job
	// (effect is "" for a unit's payload) when it returns true. RedactAll
	// hides every one.
	Redact func(job, effect string) bool
	// Log receives a line per action taken or refused, with who; nil: the
	// default logger.
	Log *slog.Logger
	// ChartHours is how many hours the chart shows by default (3 when 0;
	// at most 24). A page's ?hours= changes it.
	ChartHours int
	// PageSize is how many rows a list page shows (50 when 0).
	PageSize int
	// CountLimit is how many rows the front page counts at most per job
	// and state (1,000 when 0): a count past it shows as "1000+", so the
	// page answers at once on any ledger and backlog (idemops.DB.StatusUpTo).
	// `idemgen status` counts them all. Parked rows lie spread over the
	// ledger's history, and each one counted per effect is a page read:
	// at 10,000 the front page took 1 to 5 s on a 10,000,000-row ledger
	// with 100,000 parked.
	CountLimit int
}

// RedactAll is an Options.Redact that hides every payload and result.
func RedactAll(job, effect string) bool { return true }

// Handler serves the operations pages; see the package documentation.
type Handler struct {
	db     *idemops.DB
	opts   Options
	log    *slog.Logger
	secret []byte       // keys the CSRF tokens
	served http.Handler // the routes behind cross-origin protection
}

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"stamp":      stamp,
	"gateState":  gateState,
	"rateText":   idemops.RateText,
	"parkedIn":   parkedIn,
	"ago":        ago,
	"plural":     plural,
	"plus":       plus,
	"owedMore":   func(m *idemops.More) bool { return m != nil && m.Owed },
	"parkedMore": func(m *idemops.More) bool { return m != nil && m.Parked },
	"doneMore":   func(m *idemops.More) bool { return m != nil && m.Done },
	"againMore":  func(m *idemops.More) bool { return m != nil && m.Again },
	"duration":   func(d time.Duration) string { return d.String() },
	"secs":       func(s idemops.Seconds) string { return time.Duration(s).String() },
	"deref":      func(s *string) string { return idemrt.ValueOr(s) },
	"timep": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return stamp(*t)
	},
}).ParseFS(templateFS, "templates/*.html"))

// New returns a handler over db. It refuses Options that would serve
// actions without an authorization hook.
func New(db *idemops.DB, opts Options) (*Handler, error) {
	if !opts.ReadOnly && opts.Authorize == nil {
		return nil, errors.New("idemui: a handler that takes actions needs Options.Authorize (or set ReadOnly)")
	}
	if opts.ChartHours <= 0 {
		opts.ChartHours = 3
	}
	opts.ChartHours = min(opts.ChartHours, 24)
	if opts.PageSize <= 0 {
		opts.PageSize = 50
	}
	if opts.CountLimit <= 0 {
		opts.CountLimit = 1000
	}
	h := &Handler{db: db, opts: opts, log: opts.Log, secret: make([]byte, 32)}
	if h.log == nil {
		h.log = slog.Default()
	}
	if _, err := rand.Read(h.secret); err != nil {
		return nil, fmt.Errorf("idemui: CSRF secret: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /parked", h.parked)
	mux.HandleFunc("GET /key", h.key)
	mux.HandleFunc("GET /confirm", h.confirm)
	mux.HandleFunc("POST /act", h.act)
	h.served = http.NewCrossOriginProtection().Handler(mux)
	return h, nil
}

// ServeHTTP serves the pages and actions. Every response forbids framing
// and caching; POSTs from another origin are refused before any handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "same-origin")
	h.served.ServeHTTP(w, r)
}

// page is what every template gets.
type page struct {
	Title    string
	Package  string
	Dialect  string
	At       time.Time
	ReadOnly bool
	Data     any
}

func (h *Handler) render(w http.ResponseWriter, status int, name, title string, data any) {
	var b strings.Builder
	p := page{Title: title, Package: h.db.Package().Name, Dialect: string(h.db.Dialect()), At: time.Now().UTC(), ReadOnly: h.opts.ReadOnly, Data: data}
	if err := pages.ExecuteTemplate(&b, name, p); err != nil {
		h.log.Error("idemui: render", "page", name, "err", err)
		http.Error(w, "idemui: cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows an error page: a read that failed (500) or a refusal.
func (h *Handler) fail(w http.ResponseWriter, status int, what string, err error) {
	h.render(w, status, "error.html", what, struct {
		What    string
		Reasons []string
	}{what, reasons(err)})
}

func reasons(err error) []string {
	if refused, ok := errors.AsType[*idem.RefusedError](err); ok {
		return refused.Reasons
	}
	return []string{err.Error()}
}

// overview is the front page: every job with its effects, the limits in
// use, and the chart.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	hours := h.opts.ChartHours
	if v, err := strconv.Atoi(r.URL.Query().Get("hours")); err == nil && v > 0 {
		hours = min(v, 24)
	}
	st, err := h.db.StatusUpTo(r.Context(), h.opts.CountLimit)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "read the status", err)
		return
	}
	limits, err := h.db.Limits(r.Context())
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "read the limits", err)
		return
	}
	activity, err := h.db.ActivityUpTo(r.Context(), time.Duration(hours)*time.Hour, h.opts.CountLimit)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "read the chart", err)
		return
	}
	h.render(w, http.StatusOK, "overview.html", "Jobs", struct {
		Status  *idemops.Status
		Limits  []idemops.Limit
		Chart   chart
		Hours   int
		Counted int               // the count limit, when a count stopped at it
		Docs    map[string]string // each job's doc in the spec
	}{st, limits, drawChart(activity), hours, counted(st, activity, h.opts.CountLimit), h.docs()})
}

// parked lists parked effects and units a page at a time, searchable by
// the start of their key.
func (h *Handler) parked(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := idemops.Filter{Job: q.Get("job"), State: idemops.EffectParked, Prefix: q.Get("q"), Limit: h.opts.PageSize, After: q.Get("after")}
	rows, err := h.db.List(r.Context(), f)
	if err != nil {
		h.fail(w, http.StatusBadRequest, "list the parked rows", err)
		return
	}
	var jobs []string
	for _, j := range h.db.Package().Jobs {
		jobs = append(jobs, j.Name)
	}
	h.render(w, http.StatusOK, "parked.html", "Parked", struct {
		Filter idemops.Filter
		Rows   *idemops.Rows
		Jobs   []string
	}{f, rows, jobs})
}

// shown is a ledger or parked-table row's payload and result as a page
// shows them: redacted, or as text.
type shownEffect struct {
	idemops.Effect
	PayloadText, ResultText string
	// Redacted hides the payload, ResultRedacted the result: by
	// Options.Redact, or by the spec's redact (idemops.Effect.Redacted).
	Redacted, ResultRedacted bool
}

type shownUnit struct {
	idemops.Unit
	PayloadText string
	Redacted    bool
}

type history struct {
	Key      string
	Effects  []shownEffect
	Units    []shownUnit
	HandedIn []idemops.HandedIn
	// Retryable and Forgettable say which actions the rows allow; Leased
	// lists the effects a live lease holds, which refuse both.
	Retryable, Forgettable bool
	Leased                 []shownEffect
}

// readHistory reads everything under key, redacted as the options say.
func (h *Handler) readHistory(r *http.Request, key string) (*history, error) {
	rows, err := h.db.History(r.Context(), key)
	if err != nil {
		return nil, err
	}
	hist := &history{Key: key, HandedIn: rows.HandedIn}
	for _, e := range rows.Effects {
		byOption := h.redact(e.Job, e.Effect)
		s := shownEffect{Effect: e, Redacted: byOption || slices.Contains(e.Redacted, "payload"), ResultRedacted: byOption || slices.Contains(e.Redacted, "result")}
		if !s.Redacted {
			s.PayloadText = string(e.Payload)
		}
		if !s.ResultRedacted {
			s.ResultText = bytesText(e.Result)
		}
		hist.Effects = append(hist.Effects, s)
		if e.Key == key {
			hist.Forgettable = true
			switch e.State {
			case idemops.EffectParked:
				hist.Retryable = true
			case idemops.EffectLeased:
				hist.Leased = append(hist.Leased, s)
			}
		}
	}
	for _, u := range rows.Units {
		s := shownUnit{Unit: u, Redacted: h.redact(u.Job, "") || u.PayloadRedacted}
		if !s.Redacted {
			s.PayloadText = string(u.Payload)
		}
		hist.Units = append(hist.Units, s)
		hist.Retryable, hist.Forgettable = true, true
	}
	if len(rows.HandedIn) > 0 {
		hist.Forgettable = true
	}
	return hist, nil
}

func (h *Handler) redact(job, effect string) bool {
	return h.opts.Redact != nil && h.opts.Redact(job, effect)
}

// key shows one key's whole history: its unit, effects, attempts, last
// errors, payloads and results.
func (h *Handler) key(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSpace(r.URL.Query().Get("k"))
	if key == "" {
		http.Redirect(w, r, "parked", http.StatusSeeOther)
		return
	}
	hist, err := h.readHistory(r, key)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "read the key's history", err)
		return
	}
	status := http.StatusOK
	if len(hist.Effects)+len(hist.Units)+len(hist.HandedIn) == 0 {
		status = http.StatusNotFound
	}
	h.render(w, status, "key.html", "Key "+key, hist)
}

// confirmation is what the confirmation page shows before an action.
type confirmation struct {
	Action  Action
	Token   string
	History *history            // ActionRetry, ActionForget
	Parked  *idemops.Rows       // ActionRetryParked: the first page of what it puts back
	Gate    *idemops.GateStatus // ActionLift: the pause or open circuit it lifts, read now
	Steer   *steerForm          // ActionLimit, ActionPause: the effect's limits and gate now, and the form
	Refusal []string            // why the action will be refused, read now
}

// confirm shows what an action will put back or remove, and the form that
// performs it. It only reads.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) {
	a, err := actionOf(r.URL.Query())
	if err != nil {
		h.fail(w, http.StatusBadRequest, "confirm", err)
		return
	}
	c := confirmation{Action: a, Token: h.token(w, r)}
	switch a.Kind {
	case ActionRetryParked:
		c.Parked, err = h.db.List(r.Context(), idemops.Filter{Job: a.Job, State: idemops.EffectParked, Limit: h.opts.PageSize})
	case ActionLift:
		c.Gate, err = h.db.Gate(r.Context(), a.Job, a.Effect)
		if err == nil && c.Gate == nil {
			c.Refusal = append(c.Refusal, fmt.Sprintf("effect %s of job %s is neither paused nor its circuit open now: there is nothing to lift", a.Effect, a.Job))
		}
	case ActionLimit, ActionPause:
		c.Steer, c.Refusal, err = h.steerConfirm(r, a)
	default:
		c.History, err = h.readHistory(r, a.Key)
		if err == nil {
			for _, e := range c.History.Leased {
				c.Refusal = append(c.Refusal, fmt.Sprintf("effect %s is leased by %s until %s: it may be calling the provider right now; the %s will be refused until the lease ends",
					e.Key, orWorker(e.LeaseOwner), stampp(e.LeaseUntil), a.Kind))
			}
			if a.Kind == ActionRetry && !c.History.Retryable {
				c.Refusal = append(c.Refusal, "nothing under this key is parked or failing: there is nothing to retry")
			}
		}
	}
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "read what the action changes", err)
		return
	}
	h.render(w, http.StatusOK, "confirm.html", "Confirm "+a.Kind, c)
}

// act performs a confirmed action: POST only, not read-only, a valid CSRF
// token, authorized; then logged with who, and its changes shown.
func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	if h.opts.ReadOnly {
		h.log.Warn("idemui: action refused: read-only", "remote", r.RemoteAddr)
		h.fail(w, http.StatusForbidden, "refused", errors.New("this page is read-only: it takes no action"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10) // an action's form is a few short fields
	if err := r.ParseForm(); err != nil {
		h.fail(w, http.StatusBadRequest, "refused", err)
		return
	}
	if !h.validToken(r, r.PostForm.Get("csrf")) {
		h.log.Warn("idemui: action refused: bad CSRF token", "remote", r.RemoteAddr)
		h.fail(w, http.StatusForbidden, "refused", errors.New("the form's token is missing or stale: open the confirmation page again"))
		return
	}
	a, err := actionOf(r.PostForm)
	if err != nil {
		h.fail(w, http.StatusBadRequest, "refused", err)
		return
	}
	attrs := []any{"action", a.Kind, "job", a.Job, "key", a.Key, "remote", r.RemoteAddr}
	if a.Effect != "" {
		attrs = append(attrs, "effect", a.Effect)
	}
	attrs = append(attrs, steerAttrs(a)...)
	who, err := h.opts.Authorize(r, a)
	if err != nil {
		h.log.Warn("idemui: action refused: not authorized", append(attrs, "err", err)...)
		h.fail(w, http.StatusForbidden, "not authorized", err)
		return
	}
	attrs = append(attrs, "who", who)
	var changes []idem.Change
	lifted, steered := false, ""
	switch a.Kind {
	case ActionRetry:
		changes, err = h.db.Retry(r.Context(), a.Key, a.Job)
	case ActionRetryParked:
		changes, err = h.db.RetryAllParked(r.Context(), a.Job)
	case ActionForget:
		changes, err = h.db.Reset(r.Context(), a.Key, a.Job, false)
	case ActionLift:
		lifted, err = h.db.LiftGate(r.Context(), a.Job, a.Effect)
	case ActionLimit, ActionPause:
		steered, err = h.steer(r, a, who)
	}
	if err != nil {
		status := http.StatusInternalServerError
		if _, refused := errors.AsType[*idem.RefusedError](err); refused {
			status = http.StatusConflict
		} else if errors.Is(err, idem.ErrNothingUnderKey) {
			status = http.StatusNotFound
		}
		h.log.Warn("idemui: action refused", append(attrs, "err", err)...)
		h.fail(w, status, a.Kind+" refused; nothing was changed", err)
		return
	}
	for _, c := range changes {
		h.log.Info("idemui: "+a.Kind, append(attrs[:len(attrs):len(attrs)], "kind", c.Kind, "changed_job", c.Job, "effect", c.Effect, "changed_key", c.Key, "was", c.State)...)
	}
	switch {
	case a.Kind == ActionLift && lifted:
		h.log.Info("idemui: lift: the effect's pause lifted or its circuit closed", attrs...)
	case steered != "":
		h.log.Info("idemui: "+a.Kind+": "+steered, attrs...)
	case len(changes) == 0:
		h.log.Info("idemui: "+a.Kind+": nothing to change", attrs...)
	}
	h.render(w, http.StatusOK, "done.html", a.Kind+" done", struct {
		Action  Action
		Who     string
		Changes []idem.Change
		Lifted  bool
		Steered string
	}{a, who, changes, lifted, steered})
}

// actionOf reads an action from a query or form.
func actionOf(v url.Values) (Action, error) {
	a := Action{Kind: v.Get("action"), Job: v.Get("job"), Key: v.Get("key")}
	switch a.Kind {
	case ActionLift, ActionLimit, ActionPause:
		return effectAction(v, a)
	case ActionRetryParked:
		a.Key = ""
	}
	return a, keyAction(a)
}

// keyAction checks an action on keys or parked work.
func keyAction(a Action) error {
	switch a.Kind {
	case ActionRetry, ActionForget:
		if a.Key == "" {
			return fmt.Errorf("%s needs a key", a.Kind)
		}
	case ActionRetryParked:
		if a.Job == "" {
			return errors.New("retry-parked needs a job")
		}
	default:
		return fmt.Errorf("unknown action %q: %s", a.Kind, strings.Join([]string{ActionRetry, ActionRetryParked, ActionForget, ActionLift, ActionLimit, ActionPause}, ", "))
	}
	return nil
}

// csrfCookie holds a random nonce per browser; a form's token is the
// nonce's MAC under the handler's secret, so a page of another origin can
// neither read nor forge it.
const csrfCookie = "idemui_csrf"

// token returns the CSRF token of the request's browser, setting its
// nonce cookie first when it has none.
func (h *Handler) token(w http.ResponseWriter, r *http.Request) string {
	nonce := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 16 {
		nonce = c.Value
	} else {
		b := make([]byte, 18)
		_, _ = rand.Read(b)
		nonce = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: nonce, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return h.mac(nonce)
}

func (h *Handler) mac(nonce string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("idemui csrf\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) validToken(r *http.Request, token string) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || token == "" {
		return false
	}
	return hmac.Equal([]byte(token), []byte(h.mac(c.Value)))
}

// parkedIn counts a job's parked effects and parked units, "+" after a
// count that stopped at the front page's limit.
func parkedIn(js idemops.JobStatus) string {
	n, more := js.Units.Parked, js.Units.More
	for _, e := range js.Effects {
		n += e.Parked
		more = more || (e.More != nil && e.More.Parked)
	}
	return plus(n, more)
}

// docs are the jobs' docs, by job, as the package's description has them.
func (h *Handler) docs() map[string]string {
	docs := map[string]string{}
	for _, j := range h.db.Package().Jobs {
		docs[j.Name] = j.Doc
	}
	return docs
}

// counted is limit when a count of st or a's failed rows stopped at it,
// else 0.
func counted(st *idemops.Status, a *idemops.Activity, limit int) int {
	more := a.FailedMore || a.DoneMore
	for _, js := range st.Jobs {
		more = more || js.Units.More
		for _, e := range js.Effects {
			more = more || e.More != nil
		}
	}
	if more {
		return limit
	}
	return 0
}

// plus shows a count, with "+" when it is a lower bound.
func plus(n int, more bool) string {
	if more {
		return strconv.Itoa(n) + "+"
	}
	return strconv.Itoa(n)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// gateState names a gate's state as the page shows it.
func gateState(g *idemops.GateStatus) string {
	switch g.State {
	case idemrt.GatePaused:
		return "paused"
	case idemrt.GateProbe:
		return "probing"
	}
	return "circuit open"
}

func stampp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

func ago(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() }

func orWorker(owner *string) string {
	if owner == nil || *owner == "" {
		return "a worker"
	}
	return "worker " + *owner
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// bytesText shows a kept result as text when it is valid UTF-8, else in hex.
func bytesText(b []byte) string {
	if b == nil {
		return ""
	}
	if s := string(b); strings.ToValidUTF8(s, "\uFFFD") == s {
		return s
	}
	return fmt.Sprintf("%d bytes: %x", len(b), b)
}
