package crashsim

// The outside world of a scenario: the sources that serve its units and
// the fake provider that counts every call.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// simIncKey marks a context with the incarnation that runs under it, so
// the provider can fail one worker's calls.
type simIncKey struct{}

func simIncOf(ctx context.Context) int {
	n, _ := ctx.Value(simIncKey{}).(int)
	return n
}

// windowSource serves the current version of each unit by watermark
// window, three per page, and records what it served to whom.
type windowSource[U any] struct {
	mu     sync.Mutex
	units  map[string]U
	keyOf  func(U) string
	markOf func(U) time.Time
	served map[int][]U
	echo   map[string]*simEcho[U] // writeahead: older versions served once (repeats.go)
	// echoAlways serves each older version to every incarnation, not once
	// (an insert_once destination: see echoed).
	echoAlways bool
}

func (s *windowSource[U]) Fetch(ctx context.Context, w idem.Window, page string) ([]U, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []U
	for _, u := range s.units {
		if m := s.markOf(u); !m.Before(w.Since) && m.Before(w.Until) {
			in = append(in, u)
		}
	}
	sort.Slice(in, func(i, j int) bool {
		if c := s.markOf(in[i]).Compare(s.markOf(in[j])); c != 0 {
			return c < 0
		}
		return s.keyOf(in[i]) < s.keyOf(in[j])
	})
	out, next := simPage(s.echoed(in, simIncOf(ctx)), page)
	s.served[simIncOf(ctx)] = append(s.served[simIncOf(ctx)], out...)
	return out, next, nil
}

func simPage[U any](in []U, page string) ([]U, string) {
	start := 0
	if page != "" {
		fmt.Sscan(page, &start)
	}
	start = min(start, len(in))
	end := min(start+3, len(in))
	next := ""
	if end < len(in) {
		next = fmt.Sprint(end)
	}
	return slices.Clone(in[start:end]), next
}

// cursorSource serves a change log; the cursor is a log position.
type cursorSource[U any] struct {
	mu     sync.Mutex
	log    []U
	served map[int][]U
	echo   map[string]U // writeahead: an older version logged once, just before the key's next
}

// append logs u, after its echo if it has one.
func (s *cursorSource[U]) append(key string, u U) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if older, ok := s.echo[key]; ok {
		delete(s.echo, key)
		s.log = append(s.log, older)
	}
	s.log = append(s.log, u)
}

func (s *cursorSource[U]) Fetch(ctx context.Context, cursor string) ([]U, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := 0
	if cursor != "" {
		fmt.Sscan(cursor, &pos)
	}
	pos = min(pos, len(s.log))
	end := min(pos+3, len(s.log))
	out := slices.Clone(s.log[pos:end])
	s.served[simIncOf(ctx)] = append(s.served[simIncOf(ctx)], out...)
	return out, fmt.Sprint(end), nil
}

type simFault int

const (
	faultNone     simFault = iota
	faultRespLost          // the provider applies, then the caller sees an error
	faultFailPre           // the provider fails before applying
	faultStall             // the call hangs past the effect's timeout (family stall)
	faultHang              // the call hangs, ignoring the cancel, while the world goes on (stall-takeover)
)

// appliedAny reports whether the provider applied any of keys.
func (p *Provider) appliedAny(keys map[string]bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		if p.applied[k] > 0 {
			return true
		}
	}
	return false
}

// Provider is the fake outside provider. It honours the idempotency key
// it is given as Stripe does: the first call applies and its result is
// returned to every later call with that key. It counts calls per key.
type Provider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	first   map[string][]byte // the result of the call that applied
	effect  map[string]string // key -> effect name
	order   []string          // keys by call number
	n       int
	faults  map[int]simFault // by call number
	// failCall's key fails its first failTimes calls (failCall < 0: none).
	failCall, failTimes int
	failing             map[string]int
	// callsAt: each call of a key that failCall made fail, on the
	// simulated clock (the failk family measures its waits).
	callsAt map[string][]time.Time
	failInc map[int]string // incarnation -> the key whose calls fail there
	// permanentCall's key fails permanently, as a declined card (-1: none).
	permanentCall int
	permanent     map[string]bool
	// throttleCall's key is answered "not now" (idem.RetryAfter of
	// throttleWait) its first throttleTimes calls (-1: none); a call of a
	// key before the time its last answer named is recorded in early.
	throttleCall, throttleTimes int
	throttleWait                time.Duration
	throttling                  map[string]int
	notBefore                   map[string]time.Time
	early                       []string
	// gate: the pause and circuit families' provider (gate.go).
	gate *simGate
	// stalling holds the keys of calls hanging now (faultStall); a second
	// call of one of them while it hangs is recorded in twice.
	stalling map[string]bool
	twice    []string
	now      func() time.Time // the simulation's clock
	journal  *os.File         // subprocess mode: every call, synced before it returns
	progress *atomic.Int64    // the scenario's (simRun.progress): a call is progress
	flight   *simFlight       // the fleet family: calls in flight per effect
	// hang is the world while a faultHang call hangs (stall-takeover, family_stall_takeover.go):
	// true when the caller's process died meanwhile.
	hang func(ctx context.Context, key string) (dropped bool)
	// onCall, when set, learns of every call as it reaches the provider,
	// before anything is counted, with the caller's context: the consumer
	// families park a dead incarnation's call there and note a live one's
	// (consume.go).
	onCall func(ctx context.Context, key string)
}

func newSimProvider() *Provider {
	return &Provider{calls: map[string]int{}, applied: map[string]int{}, first: map[string][]byte{},
		effect: map[string]string{}, faults: map[int]simFault{}, failCall: -1, failing: map[string]int{}, callsAt: map[string][]time.Time{}, failInc: map[int]string{},
		permanentCall: -1, permanent: map[string]bool{},
		throttleCall: -1, throttling: map[string]int{}, notBefore: map[string]time.Time{}, stalling: map[string]bool{}, gate: newSimGate()}
}

func (p *Provider) Call(ctx context.Context, effect, key string) ([]byte, error) {
	if p.onCall != nil {
		p.onCall(ctx, key)
	}
	if p.progress != nil {
		p.progress.Add(1)
	}
	if p.flight != nil {
		defer p.flight.enter(effect)()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.n
	p.n++
	p.calls[key]++
	p.effect[key] = effect
	p.order = append(p.order, key)
	if p.stalling[key] {
		p.twice = append(p.twice, key)
	}
	if n == p.failCall {
		p.failing[key] = p.failTimes
	}
	if _, ok := p.failing[key]; ok && p.now != nil {
		p.callsAt[key] = append(p.callsAt[key], p.now())
	}
	if n == p.permanentCall {
		p.permanent[key] = true
	}
	if t, ok := p.notBefore[key]; ok && p.now != nil && p.now().Before(t) {
		p.early = append(p.early, fmt.Sprintf("%s at %s, told not before %s", key, p.now().Format(time.RFC3339), t.Format(time.RFC3339)))
	}
	if p.now != nil && p.gate.probe(effect, key, p.now()) {
		p.mu.Unlock()
		p.gate.holdProbe(effect, key)
		p.mu.Lock()
		p.gate.probing[effect]--
	}
	if p.now != nil {
		if err, answered := p.gate.answer(n, effect, key, p.now()); answered {
			return nil, err
		}
	}
	if n == p.throttleCall {
		p.throttling[key] = p.throttleTimes
	}
	if p.throttling[key] > 0 {
		p.throttling[key]--
		if p.now != nil {
			p.notBefore[key] = p.now().Add(p.throttleWait)
		}
		return nil, idem.RetryAfter(p.throttleWait, fmt.Errorf("simulated 429 for %s", key))
	}
	if p.permanent[key] {
		return nil, idem.Permanent(fmt.Errorf("simulated permanent failure of %s: card declined", key))
	}
	if p.failing[key] > 0 {
		p.failing[key]--
		return nil, fmt.Errorf("simulated provider failure of %s, %d more to come", key, p.failing[key])
	}
	if p.faults[n] == faultFailPre {
		return nil, errors.New("simulated provider failure before applying")
	}
	if p.faults[n] == faultStall {
		// It hangs, without the lock, until its context ends (the
		// effect's timeout) or simStallFor passes; only a call that
		// outlasts the wait applies.
		p.stalling[key] = true
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(simStallFor):
		}
		p.mu.Lock()
		delete(p.stalling, key)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("simulated stalled call, abandoned: %w", err)
		}
	}
	if p.faults[n] == faultHang && p.hang != nil {
		p.stalling[key] = true
		p.mu.Unlock()
		dropped := p.hang(ctx, key)
		p.mu.Lock()
		delete(p.stalling, key)
		if dropped {
			return nil, errDropped
		}
	}
	if k, ok := p.failInc[simIncOf(ctx)]; ok && k == key {
		return nil, errors.New("simulated failure of this worker's call")
	}
	if p.applied[key] == 0 {
		p.applied[key] = 1
		p.first[key] = fmt.Appendf(nil, "result:%s:call%d", key, n)
	}
	if p.journal != nil {
		fmt.Fprintf(p.journal, "%s\t%s\t%s\n", key, effect, p.first[key])
		_ = p.journal.Sync()
	}
	if p.faults[n] == faultRespLost {
		return nil, errors.New("simulated timeout after the provider applied")
	}
	return p.first[key], nil
}
