package idemrt

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestRecorderWritesALoneResultWithoutWaitingForItsGroup: a slow provider's
// one finished call must reach the ledger on the recorder's timer, not wait
// for a full group or for the batch to close. The bound checked here is a
// hundred times recordEvery: it catches a result held until close (which
// this test never calls before the check), not a slow timer.
func TestRecorderWritesALoneResultWithoutWaitingForItsGroup(t *testing.T) {
	var mu sync.Mutex
	var written [][]string
	write := func(_ context.Context, keys []string, _ [][]byte) (map[string]bool, error) {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, append([]string(nil), keys...))
		ok := map[string]bool{}
		for _, k := range keys {
			ok[k] = true
		}
		return ok, nil
	}
	r := startRecorder(context.Background(), write, 100)
	defer r.close()

	c := r.submit(context.Background(), "fx:1", []byte(`{}`))
	select {
	case <-c.done:
	case <-time.After(100 * recordEvery):
		t.Fatalf("a lone result was not written within %v of its submission; the recorder waits for a full group", 100*recordEvery)
	}
	if !c.ok || c.err != nil {
		t.Fatalf("recorded = %v, err = %v; want recorded, no error", c.ok, c.err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(written) != 1 || len(written[0]) != 1 || written[0][0] != "fx:1" {
		t.Fatalf("writes = %v; want one write of the lone result", written)
	}
}
