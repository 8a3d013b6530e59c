package main

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// provider is the outside world: a receipt service on loopback that
// honours Idempotency-Key (a repeated key gets the first answer and applies
// nothing) and counts every request. It also knows which payment a request
// is for, so a payment receipted under two keys (or none) is a duplicate:
// the one thing keys exist to prevent.
type provider struct {
	mu       sync.Mutex
	requests int
	repeats  int            // requests whose key was already applied: absorbed
	keys     map[string]int // applications per key (at most 1)
	events   map[string]int // applications per payment, under any key
	noKey    int            // requests without a key
	// delay is how long a request takes after it is applied: a worker
	// killed in it never learns the answer, and repeats the call.
	delay time.Duration
}

func newProvider() *provider {
	return &provider{keys: map[string]int{}, events: map[string]int{}}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req receiptRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.EventID == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	defer time.Sleep(p.delay) // runs after the unlock: applied, not yet answered
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	switch {
	case key == "":
		p.noKey++
		p.events[req.EventID]++ // applied, unprotected
	case p.keys[key] > 0:
		p.repeats++
	default:
		p.keys[key]++
		p.events[req.EventID]++
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"receipt":"rcpt-` + req.EventID + `"}`))
}

// tally is what the provider saw.
type tally struct {
	requests, repeats, noKey int
	applied                  map[string]int // per payment
}

func (p *provider) tally() tally {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := tally{requests: p.requests, repeats: p.repeats, noKey: p.noKey, applied: map[string]int{}}
	for e, n := range p.events {
		t.applied[e] = n
	}
	return t
}
