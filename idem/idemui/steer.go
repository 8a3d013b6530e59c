package idemui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
)

// Steering from the page: limit overrides an effect's rate and
// concurrency fleet-wide, or puts the spec's back (Reset); pause pauses
// it for a while (idem.SetLimits, idem.ResetLimits, idem.PauseByHand, as
// `idemgen ledger limit` and `pause` do). Both go through the same
// confirmation page, CSRF token, Authorize and log line as retry and
// lift; who did it is Authorize's name, which status and the page show.

// effectAction reads the effect an action on a gate or limits is about,
// and its values.
func effectAction(v url.Values, a Action) (Action, error) {
	a.Effect, a.Key = v.Get("effect"), ""
	if a.Job == "" || a.Effect == "" {
		return a, fmt.Errorf("%s needs a job and an effect", a.Kind)
	}
	var err error
	switch a.Kind {
	case ActionLimit:
		a.Reset = v.Get("reset") != ""
		a.Rate = strings.TrimSpace(v.Get("rate"))
		if c := strings.TrimSpace(v.Get("concurrency")); c != "" {
			if a.Concurrency, err = strconv.Atoi(c); err != nil || a.Concurrency < 0 {
				return a, fmt.Errorf("concurrency %q: want a positive number of calls at once", c)
			}
		}
		if a.Rate != "" {
			if _, err := idemops.ParseRate(a.Rate); err != nil {
				return a, err
			}
		}
	case ActionPause:
		if f := strings.TrimSpace(v.Get("for")); f != "" {
			if a.For, err = time.ParseDuration(f); err != nil || a.For <= 0 {
				return a, fmt.Errorf("pause for %q: want a positive duration (30m, 2h)", f)
			}
		}
	}
	return a, nil
}

// steerForm is what the confirmation page of limit or pause shows: the
// effect's limits in the spec, the override and gate now, and the values
// the form starts with.
type steerForm struct {
	Spec     *idemops.EffectSpec
	Override *idemops.OverrideStatus
	Gate     *idemops.GateStatus
	Rate     string // the form's values
	Conc     string
	For      string
}

// steerConfirm reads what the confirmation page of a limit or pause shows.
func (h *Handler) steerConfirm(r *http.Request, a Action) (*steerForm, []string, error) {
	var spec *idemops.EffectSpec
	for _, j := range h.db.Package().Jobs {
		for _, e := range j.Effects {
			if j.Name == a.Job && e.Name == a.Effect {
				spec = e
			}
		}
	}
	if spec == nil {
		return nil, []string{fmt.Sprintf("job %s has no effect %s in the spec: there is nothing to steer", a.Job, a.Effect)}, nil
	}
	f := &steerForm{Spec: spec, Rate: a.Rate, For: "30m"}
	if a.Concurrency > 0 {
		f.Conc = strconv.Itoa(a.Concurrency)
	}
	if a.For > 0 {
		f.For = a.For.String()
	}
	var err error
	if f.Override, err = h.db.Override(r.Context(), a.Job, a.Effect); err != nil {
		return nil, nil, err
	}
	if f.Gate, err = h.db.Gate(r.Context(), a.Job, a.Effect); err != nil {
		return nil, nil, err
	}
	if f.Override != nil && f.Rate == "" && f.Conc == "" {
		if f.Override.RateN > 0 {
			f.Rate = idemops.RateText(f.Override.RateN, time.Duration(f.Override.RatePer))
		}
		if f.Override.Concurrency > 0 {
			f.Conc = strconv.Itoa(f.Override.Concurrency)
		}
	}
	return f, nil, nil
}

// steer performs a confirmed limit or pause as who, and says what it did.
func (h *Handler) steer(r *http.Request, a Action, who string) (string, error) {
	switch {
	case a.Kind == ActionPause:
		if a.For <= 0 {
			return "", errors.New("pause needs a duration (30m, 2h)")
		}
		until, err := h.db.PauseByHand(r.Context(), a.Job, a.Effect, a.For, who)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Paused: no worker calls effect %s of job %s before %s. Lift ends it early.", a.Effect, a.Job, stamp(until)), nil
	case a.Reset:
		had, err := h.db.ResetLimits(r.Context(), a.Job, a.Effect, who)
		if err != nil {
			return "", err
		}
		if !had {
			return fmt.Sprintf("Effect %s of job %s had no limits set by hand: nothing changed.", a.Effect, a.Job), nil
		}
		return fmt.Sprintf("Effect %s of job %s follows the spec's limits again, on every worker within about a second.", a.Effect, a.Job), nil
	}
	if a.Rate == "" && a.Concurrency == 0 {
		return "", errors.New("limit needs a rate, a concurrency or both (or the spec's back)")
	}
	o := idem.LimitOverride{Concurrency: int32(a.Concurrency), By: who}
	if a.Rate != "" {
		rate, err := idemops.ParseRate(a.Rate)
		if err != nil {
			return "", err
		}
		o.Rate = rate
	}
	if err := h.db.SetLimits(r.Context(), a.Job, a.Effect, o); err != nil {
		return "", err
	}
	got, err := h.db.Override(r.Context(), a.Job, a.Effect)
	if err != nil || got == nil {
		return "", errors.Join(errors.New("the limits were set, but reading them back failed"), err)
	}
	return "Set: " + got.Text() + "; every worker follows within about a second.", nil
}

// steerAttrs are a limit or pause's values, for its log line.
func steerAttrs(a Action) []any {
	switch {
	case a.Kind == ActionPause:
		return []any{"for", a.For.String()}
	case a.Kind == ActionLimit && a.Reset:
		return []any{"reset", true}
	case a.Kind == ActionLimit:
		return []any{"rate", a.Rate, "concurrency", a.Concurrency}
	}
	return nil
}
